"""Fashion-MNIST (the full set, or the mini subset shipped with tuitrain) and synthetic
images, held on the device as uint8 (`DeviceSource`, the device path), or behind a
DataLoader (`data.loader = "dataloader"`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from tuitrain.core.errors import UserError
from tuitrain.engine.data.augment import Augment
from tuitrain.engine.data.idx import Log, locate_fashion_mnist, read_split
from tuitrain.engine.data.loader import LoaderSource
from tuitrain.engine.data.sources import (
    SPLITS,
    Batch,
    BatchSource,
    DataBundle,
    SourceContext,
    aug_text,
    check_labels,
    counts_text,
    epoch_permutation,
    limit_samples,
    mix_seed,
    normalise,
    train_batch_count,
)

FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
# uniform random bytes: mean 127.5/255, std sqrt((256²-1)/12)/255, so inputs are ~N(0, 1)-scaled
_SYNTH_MEAN, _SYNTH_STD = 0.5, 0.2898
_SYNTH_POOL_MAX = 256  # distinct synthetic images per split; batches index into the pool
_SYNTH_POOL_BYTES = 256 << 20
_SYNTH_SIZES = {"train": 2560, "val": 512}
MINI_DIR = Path(__file__).resolve().parents[2] / "data" / "fashion_mini"


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


def fashion_bundle(ctx: SourceContext, log: Log | None) -> DataBundle:
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
            sources[split] = LoaderSource(
                TensorDataset(images, labels), ctx, train=train,
                mean=FASHION_MEAN, std=FASHION_STD, name=name,
            )  # fmt: skip
    shape = tuple(images.shape[1:])
    return DataBundle(
        sources["train"], sources["val"], cfg.num_classes, shape,
        f"{name} ({counts_text(sources)}){aug_text(sources)}",
    )  # fmt: skip


def synthetic_bundle(ctx: SourceContext) -> DataBundle:
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
