"""The data layer: turns a `DataConfig` into train/val batch sources the engine iterates.

Two ways to make batches:

* the device path (`data.loader = "device"`, this module): the whole split sits on the
  device as uint8 and a batch is one `index_select` plus a fused normalise. No worker
  processes, no per-sample Python, no host sync; for a 28×28 data set this is far faster
  than any DataLoader.
* the DataLoader path (`data.loader = "dataloader"`, and always for user datasets): a torch
  `DataLoader` with pinned memory, persistent workers and non-blocking copies
  (`tuitrain.engine.loader`).

Either way the batch order depends only on (seed, epoch), and `batches(epoch, start)` skips
the first `start` batches without loading them, so a resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.data import TensorDataset

from tuitrain.core.config import DataConfig
from tuitrain.core.errors import UserError
from tuitrain.engine.augment import Augment
from tuitrain.engine.idx import Log, locate_fashion_mnist, read_split

FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
# uniform random bytes: mean 127.5/255, std sqrt((256²-1)/12)/255, so inputs are ~N(0, 1)-scaled
_SYNTH_MEAN, _SYNTH_STD = 0.5, 0.2898
_SYNTH_POOL_MAX = 256  # distinct synthetic images per split; batches index into the pool
_SYNTH_POOL_BYTES = 256 << 20
_SYNTH_SIZES = {"train": 2560, "val": 512}
MINI_DIR = Path(__file__).resolve().parents[1] / "data" / "fashion_mini"
SPLITS = ("train", "val")

Batch = tuple[torch.Tensor, torch.Tensor]


class BatchSource(Protocol):
    """What the engine iterates: one epoch of (x float32 normalised, y int64), on the device."""

    num_samples: int  # samples per epoch on this rank (after sharding / dropping)

    def __len__(self) -> int: ...  # batches per epoch on this rank

    def batches(self, epoch: int, start: int = 0) -> Iterator[Batch]: ...


@dataclass
class DataBundle:
    train: BatchSource
    val: BatchSource
    num_classes: int
    input_shape: tuple[int, ...]  # (C, H, W) for images
    description: str  # one line for the UI and the run log
    vocabulary: Any = None  # text data: the characters <-> ids map (engine/charlm.py)


@dataclass(frozen=True)
class SourceContext:
    """The arguments of build_data that every source needs."""

    cfg: DataConfig
    device: torch.device
    seed: int
    rank: int
    world_size: int
    channels_last: bool
    classify: bool = True  # batches are (x, class index); else whatever the dataset yields

    def batch_size(self, train: bool) -> int:
        return self.cfg.batch_size if train else self.cfg.eval_batch_size


# --------------------------------------------------------------------------- helpers


def mix_seed(*parts: object) -> int:
    """A 63-bit seed from several values; hashing keeps (seed, epoch) pairs from colliding."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of an epoch, made on the CPU so every device type agrees."""
    generator = torch.Generator().manual_seed(mix_seed(seed, epoch))
    return torch.randperm(n, generator=generator)


def normalise(x: torch.Tensor, mean: float, std: float, channels_last: bool) -> torch.Tensor:
    """uint8 -> float32 ((x/255 - mean) / std) as two in-place ops on the device."""
    x = x.to(torch.float32).mul_(1.0 / (255.0 * std)).add_(-mean / std)
    if channels_last and x.ndim == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def check_labels(labels: torch.Tensor, num_classes: int, split: str, name: str) -> None:
    """Raise on labels outside [0, num_classes) while they are still on the CPU.

    On the device an out-of-range label is a device-side assert that kills the process
    without saying which label or data set was wrong.
    """
    if labels.dtype.is_floating_point or labels.is_complex() or labels.dtype == torch.bool:
        raise UserError(
            f"labels of the '{split}' split of {name} are {labels.dtype}, not integers."
        )
    bad = (labels < 0) | (labels >= num_classes)
    if labels.numel() and bool(bad.any()):
        value = int(labels[bad].reshape(-1)[0])
        raise UserError(
            f"label {value} in the '{split}' split of {name} is outside [0, {num_classes});"
            " set data.num_classes or fix the dataset."
        )


def limit_samples(n: int, wanted: int) -> int:
    return wanted if 0 < wanted < n else n


def train_batch_count(per_rank: int, ctx: SourceContext, name: str) -> int:
    """Train batches per rank; zero would make an epoch silently empty, so refuse it."""
    batches = per_rank // ctx.cfg.batch_size
    if batches == 0:
        raise UserError(
            f"the 'train' split of {name} has {per_rank} samples per rank, fewer than"
            f" data.batch_size = {ctx.cfg.batch_size}; lower the batch size or use more samples."
        )
    return batches


# --------------------------------------------------------------------------- device path


class DeviceSource:
    """A split held on the device as uint8; a batch is an index into it.

    `images` may be a pool smaller than `labels` (synthetic data): item i then shows image
    i mod pool, which keeps a large synthetic set cheap on memory.
    """

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, ctx: SourceContext, *, train: bool,
        mean: float, std: float, name: str,
    ) -> None:  # fmt: skip
        self._images, self._labels, self._ctx = images, labels, ctx
        self._train, self._mean, self._std = train, mean, std
        self._n, self._pool = len(labels), len(images)
        self.dataset_size = self._n  # the whole split, before sharding
        self._bs = ctx.batch_size(train)
        self.augment = Augment.from_config(ctx.cfg, ctx.seed, ctx.rank) if train else None
        if train:
            self._per_rank = self._n // ctx.world_size
            self._batches = train_batch_count(self._per_rank, ctx, name)
            self.num_samples = self._batches * self._bs
        else:  # every rank evaluates the whole val set: simpler, and exact
            self._batches = math.ceil(self._n / self._bs)
            self.num_samples = self._n

    def __len__(self) -> int:
        return self._batches

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's sample order for `epoch` (CPU, int64), already cut to whole batches."""
        if not self._train:
            return torch.arange(self._n)
        perm = epoch_permutation(self._n, self._ctx.seed, epoch)
        # every rank takes a disjoint stride of the same permutation, cut to equal length
        shard = perm[self._ctx.rank :: self._ctx.world_size][: self._per_rank]
        return shard[: self.num_samples]

    def batches(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        order = self.indices(epoch)
        device = self._ctx.device
        if device.type == "cuda":
            order = order.pin_memory()  # so the one copy per epoch does not block the host
        order = order.to(device, non_blocking=True)
        draws = self.augment.draws(epoch, self.num_samples, device) if self.augment else None
        for b in range(start, self._batches):
            idx = order[b * self._bs : (b + 1) * self._bs]
            image_idx = idx.remainder(self._pool) if self._pool < self._n else idx
            x = self._images.index_select(0, image_idx)
            if draws is not None:
                x = draws(x, b * self._bs)
            y = self._labels.index_select(0, idx)
            yield normalise(x, self._mean, self._std, self._ctx.channels_last), y


# --------------------------------------------------------------------------- data sets


def _fashion_bundle(ctx: SourceContext, log: Log | None) -> DataBundle:
    cfg = ctx.cfg
    if cfg.name == "fashion_mini":
        folder, where = MINI_DIR, "mini subset shipped with tuitrain"
    else:
        folder = locate_fashion_mnist(cfg.data_dir, log)
        where = f"from {folder}"
    name = f"Fashion-MNIST {where}"
    splits = {split: read_split(folder, split) for split in SPLITS}
    shapes = {split: tuple(images.shape[1:]) for split, (images, _) in splits.items()}
    if shapes["train"] != shapes["val"]:
        (th, tw), (vh, vw) = shapes["train"], shapes["val"]
        raise UserError(
            f"the images of {name} are {th}x{tw} in the 'train' split but {vh}x{vw} in the"
            " 'val' split; both splits must have images of one size."
        )
    sources: dict[str, BatchSource] = {}
    for split in SPLITS:
        images, labels = splits[split]
        n = limit_samples(len(labels), cfg.train_samples if split == "train" else cfg.val_samples)
        images, labels = images[:n].unsqueeze(1), labels[:n]  # N×1×H×W
        check_labels(labels, cfg.num_classes, split, name)  # once, on the CPU
        train = split == "train"
        if cfg.loader == "device":
            sources[split] = DeviceSource(
                images.to(ctx.device), labels.to(ctx.device), ctx, train=train,
                mean=FASHION_MEAN, std=FASHION_STD, name=name,
            )  # fmt: skip
        else:
            from tuitrain.engine.loader import LoaderSource  # it imports this module

            sources[split] = LoaderSource(
                TensorDataset(images, labels), ctx, train=train,
                mean=FASHION_MEAN, std=FASHION_STD, name=name,
            )  # fmt: skip
    shape = tuple(images.shape[1:])
    return DataBundle(
        sources["train"], sources["val"], cfg.num_classes, shape,
        f"{name} ({counts_text(sources)}){aug_text(sources)}",
    )  # fmt: skip


def _synthetic_bundle(ctx: SourceContext) -> DataBundle:
    """Random uint8 images and labels made on the device by a seeded generator (no files)."""
    cfg = ctx.cfg
    shape = (cfg.channels, cfg.image_size, cfg.image_size)
    sources: dict[str, BatchSource] = {}
    for split in SPLITS:
        n = (cfg.train_samples if split == "train" else cfg.val_samples) or _SYNTH_SIZES[split]
        pool = max(1, min(n, _SYNTH_POOL_MAX, _SYNTH_POOL_BYTES // math.prod(shape)))
        generator = torch.Generator(device=ctx.device).manual_seed(mix_seed(ctx.seed, split))
        images = torch.randint(
            0, 256, (pool, *shape), generator=generator, device=ctx.device, dtype=torch.uint8
        )
        # a label per pool image, so the model can at least memorise the train pool
        pool_labels = torch.randint(
            0, cfg.num_classes, (pool,), generator=generator, device=ctx.device
        )
        labels = pool_labels.repeat(math.ceil(n / pool))[:n]
        sources[split] = DeviceSource(
            images, labels, ctx, train=split == "train", mean=_SYNTH_MEAN, std=_SYNTH_STD,
            name="synthetic data",
        )  # fmt: skip
    description = (
        f"synthetic {'×'.join(map(str, shape))} random images, {cfg.num_classes} classes,"
        f" made on {ctx.device.type} ({counts_text(sources)}){aug_text(sources)}"
    )
    return DataBundle(sources["train"], sources["val"], cfg.num_classes, shape, description)


def counts_text(sources: dict[str, Any]) -> str:
    """'60,000 train / 10,000 val' from the sources' full (unsharded) sizes."""
    return f"{sources['train'].dataset_size:,} train / {sources['val'].dataset_size:,} val"


def aug_text(sources: dict[str, Any]) -> str:
    """', train aug: random crop ±2 px + h-flip', or '' when the train split is not augmented."""
    augment = getattr(sources["train"], "augment", None)
    return f", train aug: {augment.describe()}" if augment else ""


# --------------------------------------------------------------------------- entry point


def __getattr__(name: str) -> Any:
    """`LoaderSource` moved to `tuitrain.engine.loader`; the old import keeps working."""
    if name == "LoaderSource":
        from tuitrain.engine.loader import LoaderSource

        return LoaderSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_data(
    cfg: DataConfig, device: torch.device, seed: int, rank: int = 0, world_size: int = 1,
    channels_last: bool = False, *, log: Log | None = None, classify: bool = True,
) -> DataBundle:  # fmt: skip
    """Train and val batch sources for `cfg.name`, sharded for `rank` of `world_size`.

    `log` receives the rare status line worth showing (a download starting); the engine
    never prints, so the UI decides where it goes.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    ctx = SourceContext(cfg, torch.device(device), seed, rank, world_size, channels_last, classify)
    if cfg.name == "synthetic":
        return _synthetic_bundle(ctx)
    if cfg.name in ("fashion_mnist", "fashion_mini"):
        return _fashion_bundle(ctx, log)
    if cfg.name == "shakespeare":
        from tuitrain.engine.charlm import text_bundle  # it imports this module

        return text_bundle(ctx)
    if ":" in cfg.name:
        from tuitrain.engine.loader import user_bundle  # it imports this module

        return user_bundle(ctx)
    raise UserError(
        f"data.name = {cfg.name!r} is unknown; use fashion_mnist, fashion_mini, synthetic,"
        " shakespeare or a factory 'package.module:function'."
    )
