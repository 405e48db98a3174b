"""Interval metrics between two log points, measured without host syncs in between.

The running loss stays on the device; the clock is read after the sync at each log point,
so samples/s is true device throughput, not the launch rate. Time that is not training
(compile, evaluation, pause) is excluded by restarting the interval.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from tuitrain.engine.device import synchronize
from tuitrain.engine.precision import Precision
from tuitrain.engine.ranktime import ForwardClock
from tuitrain.engine.telemetry import Telemetry
from tuitrain.metrics.records import train_record

__all__ = ["IntervalMeter"]


class IntervalMeter:
    """Accumulates one log interval; `record()` syncs once and returns a `train` record."""

    def __init__(self, device: torch.device, precision: Precision, world_size: int = 1) -> None:
        self.device = device
        self.precision = precision
        self.world_size = world_size
        self.telemetry = Telemetry(device)
        self.skipped_steps = 0
        self._skipped_dev = torch.zeros((), device=device, dtype=torch.int64)
        self._last_scale: float | None = None
        self.forward_clock: ForwardClock | None = None  # DDP only: the straggler measure
        self.restart()

    def restart(self) -> None:
        """Begin a new log interval: a fresh loss window and a fresh clock."""
        self._loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        self._micro_batches = 0
        self.grad_norm: torch.Tensor | None = None
        self.restart_clock()

    def restart_clock(self) -> None:
        """Restart the throughput clock only (after compile, eval or a pause): that time is
        not training, but the losses of the interval still count."""
        self.samples = 0
        self.steps = 0
        self.data_wait_s = 0.0
        if self.forward_clock is not None:
            self.forward_clock.reset()
        self._t0 = time.perf_counter()

    def state_dict(self) -> dict[str, Any]:
        """The open interval's loss window and the skip counter (for exact resume)."""
        return {
            "loss_sum": self._loss_sum.detach().cpu().clone(),
            "micro_batches": self._micro_batches,
            "skipped": self._skipped_dev.detach().cpu().clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loss_sum = state["loss_sum"].to(self.device)
        self._micro_batches = int(state["micro_batches"])
        self._skipped_dev = state["skipped"].to(self.device)
        self.skipped_steps = int(self._skipped_dev.item())

    def add_micro(self, loss: torch.Tensor, batch_size: int) -> None:
        self._loss_sum += loss.detach().float()  # device add: no sync
        self._micro_batches += 1
        self.samples += batch_size

    def note_scale_before_step(self) -> torch.Tensor | None:
        scale = self.precision.scale_tensor()
        return None if scale is None else scale.clone()

    def note_scale_after_step(self, before: torch.Tensor | None) -> None:
        """A scale decrease means the scaler skipped the optimizer step (inf/NaN grads)."""
        after = self.precision.scale_tensor()
        if before is not None and after is not None:
            self._skipped_dev += (after < before).to(torch.int64)  # stays on the device

    def record(self, step: int, epoch: float, samples_total: int, lr: float) -> dict[str, Any]:
        synchronize(self.device)  # sync point: the one per log interval
        wall = max(time.perf_counter() - self._t0, 1e-9)
        loss = (self._loss_sum / max(self._micro_batches, 1)).item()  # sync point (already synced)
        scale_tensor = self.precision.scale_tensor()
        grad_scale = float(scale_tensor.item()) if scale_tensor is not None else None
        self.skipped_steps = int(self._skipped_dev.item())
        self._last_scale = grad_scale
        record = train_record(
            step=step,
            epoch=epoch,
            samples=samples_total,
            loss=loss,
            lr=lr,
            samples_per_s=self.samples / wall,  # this rank's; DDP sums across ranks
            step_time_s=wall / max(self.steps, 1),
            data_wait_s=self.data_wait_s,
            data_wait_frac=min(self.data_wait_s / wall, 1.0),
            telemetry=self.telemetry.read(),
            grad_scale=grad_scale,
            skipped_steps=self.skipped_steps if self.precision.scaler is not None else None,
            grad_norm=float(self.grad_norm.item()) if self.grad_norm is not None else None,
        )
        if self.forward_clock is not None:  # this rank's own work per step, read after the sync
            record["busy_s"] = (self.data_wait_s + self.forward_clock.read()) / max(self.steps, 1)
        self.last_loss = loss
        self.restart()
        return record
