"""How the model is spread over the ranks: one class per way (a single process, DDP).

A strategy wraps the plain module for training, says how a micro-batch that does not step
skips the gradient all-reduce (accumulation), produces and loads the model's state dict
under plain names (a checkpoint never holds `module.` or `_orig_mod.` prefixes, so it loads
into any strategy), and merges each log point's train record over the ranks. The trainer and
the checkpoint code ask the strategy; they never look at the wrapper. A new way (FSDP2) is
one more class here and one more branch in `make_strategy`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from tuitrain.engine.distributed import DistInfo, gather_metrics


class Strategy:
    """The seam, with a single process's answers as defaults: the model as it is, no
    gradient sync, the record as measured."""

    def __init__(self, dist: DistInfo, device: torch.device) -> None:
        self.dist, self.device = dist, device
        self.module: nn.Module | None = None  # the plain module, once wrapped

    def wrap(self, model: nn.Module) -> nn.Module:
        """What the step calls (torch.compile goes over it); `model` stays the plain one."""
        self.module = model
        return model

    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        """Around a micro-batch's backward: `skip` (the micro-batch does not step) keeps its
        gradients local, summed into the next; nothing to skip here."""
        return contextlib.nullcontext()

    def model_state_dict(self) -> dict[str, Any]:
        """The model's weights and buffers under the plain module's names."""
        return self.plain().state_dict()

    def load_model_state_dict(self, state: Mapping[str, Any]) -> None:
        self.plain().load_state_dict(state)

    def gather_metrics(self, record: dict[str, Any], metric_names: tuple[str, ...]) -> bool:
        """Merge a train record over the ranks, in place; True when that read the device
        (a host sync the meter counts). One process: the record is everyone's already."""
        return False

    def plain(self) -> nn.Module:
        if self.module is None:
            raise RuntimeError("the strategy has not wrapped a model yet")
        return self.module


class Single(Strategy):
    """One process, one device: the defaults."""


class DDPStrategy(Strategy):
    """DistributedDataParallel: the gradients all-reduced in buckets during backward, every
    rank holding the whole model; records merged with one all-gather per log point
    (engine/distributed.py, the merge rules of RANK_MERGE in metrics/records.py)."""

    def __init__(self, dist: DistInfo, device: torch.device) -> None:
        super().__init__(dist, device)
        self.ddp: nn.Module | None = None

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        self.module = model
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(model, device_ids=ids)
        return self.ddp

    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        # DDP: all-reduce the gradients only on the micro-batch that steps
        if skip and self.ddp is not None:
            return self.ddp.no_sync()  # type: ignore[operator,no-any-return]
        return contextlib.nullcontext()

    def gather_metrics(self, record: dict[str, Any], metric_names: tuple[str, ...]) -> bool:
        gather_metrics(record, self.dist, self.device, metric_names)
        return True  # the all-gather's result read on the host


def make_strategy(dist: DistInfo, device: torch.device) -> Strategy:
    """DDP with more than one rank, else the single process."""
    return DDPStrategy(dist, device) if dist.world_size > 1 else Single(dist, device)
