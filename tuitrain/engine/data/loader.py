"""The DataLoader path: a torch `DataLoader` with pinned memory, persistent workers and
non-blocking copies (`data.loader = "dataloader"`, and always for user datasets).

Each epoch's order comes from the same permutation as the device path (one process), or a
`DistributedSampler` (DDP); `batches(epoch, start)` skips the first `start` batches without
loading them, so a resumed run continues exactly.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset

from tuitrain.core.config import DataConfig
from tuitrain.core.errors import UserError
from tuitrain.engine.data.augment import Augment
from tuitrain.engine.data.sources import (
    SPLITS,
    DataBundle,
    SourceContext,
    aug_text,
    check_labels,
    counts_text,
    epoch_permutation,
    limit_samples,
    mix_seed,
    normalise,
    to_device,
    train_batch_count,
)
from tuitrain.engine.factory import blame_user, error_line, is_memory_error, load_factory


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
        self, dataset: Dataset, ctx: SourceContext, *, train: bool, mean: float, std: float,
        name: str,
    ) -> None:  # fmt: skip
        self._ctx, self._mean, self._std, self._name = ctx, mean, std, name
        self._split = "train" if train else "val"
        self._bs = ctx.batch_size(train)
        self.augment = Augment.from_config(ctx.cfg, ctx.seed, ctx.rank) if train else None
        n = len(dataset)  # type: ignore[arg-type]
        self.dataset_size = n  # the whole split, before sharding
        if train:
            order, per_rank = self._train_order(dataset, n, ctx)
            self._batches = train_batch_count(per_rank, ctx, name)
            self.num_samples = self._batches * self._bs
            self._sampler = _EpochSampler(n, order)
        else:  # val: a fixed order, not sharded (every rank evaluates all of it)
            self._batches = math.ceil(n / self._bs)
            self.num_samples = n
            self._sampler = _EpochSampler(n)
        self._loader = DataLoader(dataset, sampler=self._sampler, drop_last=train, **self._kwargs())

    @staticmethod
    def _train_order(
        dataset: Dataset, n: int, ctx: SourceContext
    ) -> tuple[Callable[[int], list[int]], int]:
        if ctx.world_size == 1:
            # the same permutation as the device path, so both paths see the same batches
            return (lambda epoch: epoch_permutation(n, ctx.seed, epoch).tolist()), n
        sampler: DistributedSampler[int] = DistributedSampler(
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

    def batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        self._sampler.set_epoch(epoch, start * self._bs)
        device = self._ctx.device
        if not self._ctx.classify:  # a task's own batches: any structure, moved as it is
            yield from (to_device(batch, device) for batch in self._loaded())
            return
        draws = self.augment.draws(epoch, self.num_samples, device) if self.augment else None
        at = start * self._bs
        for x, y in self._loaded():
            check_labels(y, self._ctx.cfg.num_classes, self._split, self._name)  # CPU, no sync
            x = x.to(device, non_blocking=True)
            if draws is not None:  # user_bundle refused non-image items up front
                x = draws(x, at)
            at += len(y)
            y = y.reshape(len(y)).to(device, non_blocking=True).long()
            yield self._as_float(x), y

    def _loaded(self) -> Iterator[Any]:
        """The loader's (x, y) batches on the CPU; what the dataset's items or the collation of
        them raise (in this process or a worker's) is one sentence naming the dataset."""
        batches = None

        def sentence(error: str) -> str:
            if not self._ctx.classify:
                return (
                    f"loading a batch of the '{self._split}' split of {self._name} failed"
                    f" ({error}); fix the dataset: its items must collate into batches"
                    " (tensors of one shape, numbers, or tuples and dicts of them)."
                )
            return (
                f"loading a batch of the '{self._split}' split of {self._name} failed ({error});"
                " fix the dataset: every item an (x, y) pair, x a Tensor of one shape, y an"
                " integer class."
            )

        while True:
            try:
                with blame_user(
                    sentence
                ):  # the yield stays outside: the consumer's errors are ours
                    if batches is None:
                        batches = iter(self._loader)
                    item = next(batches, None)
                    if item is None:
                        return
                    if self._ctx.classify:  # else the task reads its batches as they are
                        x, y = item
                        if not isinstance(x, torch.Tensor):
                            raise TypeError(f"x collates to a {type(x).__name__}, not a Tensor")
                        item = (x, torch.as_tensor(y))
            except BaseException:
                # a failed batch: end the loader's workers now (left to the garbage collector,
                # their shutdown held the process ~10 s after the error was reported)
                shutdown = getattr(batches, "_shutdown_workers", None)
                if shutdown is not None:
                    with contextlib.suppress(Exception):
                        shutdown()
                raise
            yield item

    def _as_float(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            return normalise(x, self._mean, self._std, self._ctx.channels_last)
        if not x.dtype.is_floating_point:
            raise UserError(f"inputs of {self._name} must be float or uint8, not {x.dtype}.")
        x = x.to(torch.float32)
        if self._ctx.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x


# --------------------------------------------------------------------------- user datasets


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
    try:
        n = len(dataset)
    except Exception as exc:  # __len__ returned a negative number, a float, or raised
        raise UserError(
            f"len() of the dataset {cfg.name}(split={split!r}) failed ({error_line(exc)});"
            " its __len__ must return the number of items."
        ) from exc
    if n == 0:
        raise UserError(f"{cfg.name}(split={split!r}) returned an empty dataset.")
    limit = limit_samples(n, cfg.train_samples if split == "train" else cfg.val_samples)
    return Subset(dataset, range(limit)) if limit < n else dataset


def _input_shape(dataset: Dataset, name: str, split: str) -> tuple[int, ...]:
    """The shape of one input, checking the item structure once with a clear message."""
    try:
        item = dataset[0]
    except Exception as exc:
        if is_memory_error(exc):
            raise
        raise UserError(
            f"item 0 of the '{split}' split of {name} raised {error_line(exc)}; fix the"
            " dataset's __getitem__."
        ) from exc
    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        raise UserError(f"items of {name} must be (x, y) pairs, not {type(item).__name__}.")
    x, y = item
    if not isinstance(x, torch.Tensor):
        raise UserError(f"x in the items of {name} is a {type(x).__name__}, not a Tensor.")
    if not _is_class_index(y):
        raise UserError(
            f"y in item 0 of the '{split}' split of {name} is {_short(y)}; labels must be"
            " integer class indices (an int or a one-element integer Tensor)."
        )
    return tuple(x.shape)


def _is_class_index(y: object) -> bool:
    if isinstance(y, bool):
        return False
    if isinstance(y, (int, np.integer)):
        return True
    if not isinstance(y, (torch.Tensor, np.ndarray)):
        return False
    try:
        t = torch.as_tensor(y)
    except (TypeError, ValueError, RuntimeError):  # an array of strings or objects
        return False
    return t.numel() == 1 and not (
        t.dtype.is_floating_point or t.is_complex() or t.dtype == torch.bool
    )


def _short(value: object) -> str:
    """'a str ('cat')': the type and a short repr, for a message about a value."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:39] + "…"
    return f"a {type(value).__name__} ({text})"


def user_bundle(ctx: SourceContext) -> DataBundle:
    """Train and val from a user factory `package.module:function(split=...)`."""
    cfg = ctx.cfg
    datasets = {split: _user_dataset(cfg, split) for split in SPLITS}
    if not ctx.classify:  # a task's own items: the task and its dry step judge them
        sources = {
            split: LoaderSource(ds, ctx, train=split == "train", mean=0.0, std=1.0, name=cfg.name)
            for split, ds in datasets.items()
        }
        return DataBundle(
            sources["train"], sources["val"], cfg.num_classes, (),
            f"{cfg.name} ({counts_text(sources)})",
        )  # fmt: skip
    shapes = {split: _input_shape(ds, cfg.name, split) for split, ds in datasets.items()}
    if shapes["train"] != shapes["val"]:
        raise UserError(
            f"the inputs of {cfg.name} have shape {shapes['train']} in the 'train' split but"
            f" {shapes['val']} in the 'val' split; both splits must give inputs of one shape."
        )
    shape = shapes["train"]
    if (cfg.crop_padding or cfg.hflip) and len(shape) != 3:
        raise UserError(
            f"data.crop_padding / data.hflip need images (C×H×W items); {cfg.name} gives"
            f" items of shape {tuple(shape)}; set both off for this data set."
        )
    # x: float already, or uint8 which is only scaled by 1/255 (mean 0, std 1)
    sources = {
        split: LoaderSource(ds, ctx, train=split == "train", mean=0.0, std=1.0, name=cfg.name)
        for split, ds in datasets.items()
    }
    counts = counts_text(sources)
    return DataBundle(
        sources["train"], sources["val"], cfg.num_classes, shape,
        f"{cfg.name} ({counts}){aug_text(sources)}",
    )  # fmt: skip
