"""What every batch source shares: the contract the engine iterates (`BatchSource`,
`DataBundle`), the seeded order, normalisation, the label check and moving a batch.

Two ways to make batches:

* the device path (`data.loader = "device"`, `DeviceSource` in data/fashion.py): the whole
  split sits on the device as uint8 and a batch is one `index_select` plus a fused normalise.
  No worker processes, no per-sample Python, no host sync; for a 28×28 data set this is far
  faster than any DataLoader.
* the DataLoader path (`data.loader = "dataloader"`, and always for user datasets): a torch
  `DataLoader` with pinned memory, persistent workers and non-blocking copies
  (`tuitrain.engine.data.loader`).

Either way the batch order depends only on (seed, epoch), and `batches(epoch, start)` skips
the first `start` batches without loading them, so a resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from tuitrain.core.config import DataConfig
from tuitrain.core.errors import UserError

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
    vocabulary: Any = None  # text data: the characters <-> ids map (data/text.py)


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


def counts_text(sources: dict[str, Any]) -> str:
    """'60,000 train / 10,000 val' from the sources' full (unsharded) sizes."""
    return f"{sources['train'].dataset_size:,} train / {sources['val'].dataset_size:,} val"


def aug_text(sources: dict[str, Any]) -> str:
    """', train aug: random crop ±2 px + h-flip', or '' when the train split is not augmented."""
    augment = getattr(sources["train"], "augment", None)
    return f", train aug: {augment.describe()}" if augment else ""


def to_device(batch: Any, device: torch.device) -> Any:
    """Every tensor in a batch (tuples, lists, dicts, nested) moved to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def first_items(batch: Any, n: int, k: int) -> Any:
    """The batch cut to its first `k` items: every tensor (and list) whose first dimension is
    the batch's `n` is sliced; anything else is kept as it is (nested the same way)."""
    if isinstance(batch, torch.Tensor):
        return batch[:k] if batch.dim() > 0 and batch.shape[0] == n else batch
    if isinstance(batch, Mapping):
        return type(batch)({key: first_items(v, n, k) for key, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(first_items(v, n, k) for v in batch))
    if isinstance(batch, tuple):
        return tuple(first_items(v, n, k) for v in batch)
    if isinstance(batch, list):
        if len(batch) == n and not any(isinstance(v, torch.Tensor) for v in batch):
            return batch[:k]  # one entry per item (texts, ids)
        return [first_items(v, n, k) for v in batch]
    return batch
