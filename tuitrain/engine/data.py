"""The data layer: turns a `DataConfig` into train/val batch sources the engine iterates.

Two ways to make batches:

* the device path (`data.loader = "device"`): the whole split sits on the device as uint8
  and a batch is one `index_select` plus a fused normalise. No worker processes, no per-sample
  Python, no host sync; for a 28×28 data set this is far faster than any DataLoader.
* the DataLoader path (`data.loader = "dataloader"`, and always for user datasets): a torch
  `DataLoader` with pinned memory, persistent workers and non-blocking copies.

Either way the batch order depends only on (seed, epoch), and `batches(epoch, start)` skips
the first `start` batches without loading them, so a resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset, TensorDataset

from tuitrain.config import DataConfig
from tuitrain.engine.factory import load_factory
from tuitrain.engine.idx import Log, locate_fashion_mnist, read_split
from tuitrain.errors import UserError

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


@dataclass(frozen=True)
class _Context:
    """The arguments of build_data that every source needs."""

    cfg: DataConfig
    device: torch.device
    seed: int
    rank: int
    world_size: int
    channels_last: bool

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


def _normalise(x: torch.Tensor, mean: float, std: float, channels_last: bool) -> torch.Tensor:
    """uint8 -> float32 ((x/255 - mean) / std) as two in-place ops on the device."""
    x = x.to(torch.float32).mul_(1.0 / (255.0 * std)).add_(-mean / std)
    if channels_last and x.ndim == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def _check_labels(labels: torch.Tensor, num_classes: int, split: str, name: str) -> None:
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


def _limit(n: int, wanted: int) -> int:
    return wanted if 0 < wanted < n else n


def _train_batches(per_rank: int, ctx: _Context, name: str) -> int:
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
        self, images: torch.Tensor, labels: torch.Tensor, ctx: _Context, *, train: bool,
        mean: float, std: float, name: str,
    ) -> None:  # fmt: skip
        self._images, self._labels, self._ctx = images, labels, ctx
        self._train, self._mean, self._std = train, mean, std
        self._n, self._pool = len(labels), len(images)
        self.dataset_size = self._n  # the whole split, before sharding
        self._bs = ctx.batch_size(train)
        if train:
            self._per_rank = self._n // ctx.world_size
            self._batches = _train_batches(self._per_rank, ctx, name)
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
        for b in range(start, self._batches):
            idx = order[b * self._bs : (b + 1) * self._bs]
            image_idx = idx.remainder(self._pool) if self._pool < self._n else idx
            x = self._images.index_select(0, image_idx)
            y = self._labels.index_select(0, idx)
            yield _normalise(x, self._mean, self._std, self._ctx.channels_last), y


# --------------------------------------------------------------------------- DataLoader path


class _EpochSampler(Sampler[int]):
    """The index list of one epoch minus the skipped prefix; set before each iter(loader).

    Slicing the index list is what makes `start` cheap: skipped samples are never loaded.
    The DataLoader keeps this same sampler object, so its persistent workers live on.
    """

    def __init__(self, n: int, order: Callable[[int], list[int]] | None = None) -> None:
        self._n, self._order = n, order  # no order: the fixed 0..n-1 (val)
        self._indices: list[int] = []

    def set_epoch(self, epoch: int, skip: int) -> None:
        self._indices = self.full_order(epoch)[skip:]

    def full_order(self, epoch: int) -> list[int]:
        return self._order(epoch) if self._order else list(range(self._n))

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices)

    def __len__(self) -> int:
        return len(self._indices)


class LoaderSource:
    """A split behind a torch DataLoader; batches are checked on the CPU, then copied."""

    def __init__(
        self, dataset: Dataset, ctx: _Context, *, train: bool, mean: float, std: float,
        name: str,
    ) -> None:  # fmt: skip
        self._ctx, self._mean, self._std, self._name = ctx, mean, std, name
        self._split = "train" if train else "val"
        self._bs = ctx.batch_size(train)
        n = len(dataset)  # type: ignore[arg-type]
        self.dataset_size = n  # the whole split, before sharding
        if train:
            order, per_rank = self._train_order(dataset, n, ctx)
            self._batches = _train_batches(per_rank, ctx, name)
            self.num_samples = self._batches * self._bs
            self._sampler = _EpochSampler(n, order)
        else:  # val: a fixed order, not sharded (every rank evaluates all of it)
            self._batches = math.ceil(n / self._bs)
            self.num_samples = n
            self._sampler = _EpochSampler(n)
        self._loader = DataLoader(dataset, sampler=self._sampler, drop_last=train, **self._kwargs())

    @staticmethod
    def _train_order(
        dataset: Dataset, n: int, ctx: _Context
    ) -> tuple[Callable[[int], list[int]], int]:
        if ctx.world_size == 1:
            # the same permutation as the device path, so both paths see the same batches
            return (lambda epoch: epoch_permutation(n, ctx.seed, epoch).tolist()), n
        sampler = DistributedSampler(
            dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True,
            seed=ctx.seed, drop_last=True,
        )  # fmt: skip

        def order(epoch: int) -> list[int]:
            sampler.set_epoch(epoch)
            return list(sampler)

        return order, len(sampler)

    def _kwargs(self) -> dict[str, Any]:
        cfg = self._ctx.cfg
        kwargs: dict[str, Any] = {
            "batch_size": self._bs,
            "num_workers": cfg.num_workers,
            "pin_memory": cfg.pin_memory and self._ctx.device.type == "cuda",
            # worker seeds come from this generator, not the global RNG, so making an
            # iterator never perturbs the model's dropout / init random stream
            "generator": torch.Generator().manual_seed(mix_seed(self._ctx.seed, "workers")),
        }
        if cfg.num_workers > 0:
            kwargs["persistent_workers"] = cfg.persistent_workers
            kwargs["prefetch_factor"] = cfg.prefetch_factor
        return kwargs

    def __len__(self) -> int:
        return self._batches

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's sample order for `epoch` (CPU, int64), cut to whole batches."""
        order = self._sampler.full_order(epoch)
        return torch.tensor(order[: self._batches * self._bs], dtype=torch.int64)

    def batches(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        self._sampler.set_epoch(epoch, start * self._bs)
        device = self._ctx.device
        for x, y in self._loader:
            y = torch.as_tensor(y)
            _check_labels(y, self._ctx.cfg.num_classes, self._split, self._name)  # CPU, no sync
            x = x.to(device, non_blocking=True)
            y = y.reshape(len(y)).to(device, non_blocking=True).long()
            yield self._as_float(x), y

    def _as_float(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            return _normalise(x, self._mean, self._std, self._ctx.channels_last)
        if not x.dtype.is_floating_point:
            raise UserError(f"inputs of {self._name} must be float or uint8, not {x.dtype}.")
        x = x.to(torch.float32)
        if self._ctx.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x


# --------------------------------------------------------------------------- data sets


def _user_dataset(cfg: DataConfig, split: str) -> Dataset:
    factory = load_factory(cfg.name, "data.name")
    try:
        dataset = factory(split=split)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(
            f"data.name = {cfg.name!r}: {cfg.name}(split={split!r}) raised"
            f" {type(exc).__name__}: {exc}"
        ) from exc
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise UserError(
            f"{cfg.name}(split={split!r}) returned a {type(dataset).__name__}; it must return a"
            " map-style torch Dataset (with __len__ and __getitem__)."
        )
    n = len(dataset)
    if n == 0:
        raise UserError(f"{cfg.name}(split={split!r}) returned an empty dataset.")
    limit = _limit(n, cfg.train_samples if split == "train" else cfg.val_samples)
    return Subset(dataset, range(limit)) if limit < n else dataset


def _input_shape(dataset: Dataset, name: str) -> tuple[int, ...]:
    """The shape of one input, checking the item structure once with a clear message."""
    item = dataset[0]
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise UserError(f"items of {name} must be (x, y) pairs, not {type(item).__name__}.")
    if not isinstance(item[0], torch.Tensor):
        raise UserError(f"x in the items of {name} is a {type(item[0]).__name__}, not a Tensor.")
    return tuple(item[0].shape)


def _user_bundle(ctx: _Context) -> DataBundle:
    cfg = ctx.cfg
    datasets = {split: _user_dataset(cfg, split) for split in SPLITS}
    shape = _input_shape(datasets["train"], cfg.name)
    # x: float already, or uint8 which is only scaled by 1/255 (mean 0, std 1)
    sources = {
        split: LoaderSource(ds, ctx, train=split == "train", mean=0.0, std=1.0, name=cfg.name)
        for split, ds in datasets.items()
    }
    counts = _counts(sources)
    return DataBundle(
        sources["train"], sources["val"], cfg.num_classes, shape, f"{cfg.name} ({counts})"
    )


def _fashion_bundle(ctx: _Context, log: Log | None) -> DataBundle:
    cfg = ctx.cfg
    if cfg.name == "fashion_mini":
        folder, where = MINI_DIR, "mini subset shipped with tuitrain"
    else:
        folder = locate_fashion_mnist(cfg.data_dir, log)
        where = f"from {folder}"
    name = f"Fashion-MNIST {where}"
    sources: dict[str, BatchSource] = {}
    for split in SPLITS:
        images, labels = read_split(folder, split)
        n = _limit(len(labels), cfg.train_samples if split == "train" else cfg.val_samples)
        images, labels = images[:n].unsqueeze(1), labels[:n]  # N×1×H×W
        _check_labels(labels, cfg.num_classes, split, name)  # once, on the CPU
        train = split == "train"
        if cfg.loader == "device":
            sources[split] = DeviceSource(
                images.to(ctx.device), labels.to(ctx.device), ctx, train=train,
                mean=FASHION_MEAN, std=FASHION_STD, name=name,
            )  # fmt: skip
        else:
            sources[split] = LoaderSource(
                TensorDataset(images, labels), ctx, train=train,
                mean=FASHION_MEAN, std=FASHION_STD, name=name,
            )  # fmt: skip
    shape = tuple(images.shape[1:])
    return DataBundle(
        sources["train"], sources["val"], cfg.num_classes, shape, f"{name} ({_counts(sources)})"
    )


def _synthetic_bundle(ctx: _Context) -> DataBundle:
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
        f" made on {ctx.device.type} ({_counts(sources)})"
    )
    return DataBundle(sources["train"], sources["val"], cfg.num_classes, shape, description)


def _counts(sources: dict[str, Any]) -> str:
    """'60,000 train / 10,000 val' from the sources' full (unsharded) sizes."""
    return f"{sources['train'].dataset_size:,} train / {sources['val'].dataset_size:,} val"


# --------------------------------------------------------------------------- entry point


def build_data(
    cfg: DataConfig, device: torch.device, seed: int, rank: int = 0, world_size: int = 1,
    channels_last: bool = False, *, log: Log | None = None,
) -> DataBundle:  # fmt: skip
    """Train and val batch sources for `cfg.name`, sharded for `rank` of `world_size`.

    `log` receives the rare status line worth showing (a download starting); the engine
    never prints, so the UI decides where it goes.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    ctx = _Context(cfg, torch.device(device), seed, rank, world_size, channels_last)
    if cfg.name == "synthetic":
        return _synthetic_bundle(ctx)
    if cfg.name in ("fashion_mnist", "fashion_mini"):
        return _fashion_bundle(ctx, log)
    if ":" in cfg.name:
        return _user_bundle(ctx)
    raise UserError(
        f"data.name = {cfg.name!r} is unknown; use fashion_mnist, fashion_mini, synthetic"
        " or a factory 'package.module:function'."
    )
