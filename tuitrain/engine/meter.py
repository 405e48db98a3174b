"""Interval metrics between two log points, measured without host syncs in between.

The running loss stays on the device; the clock is read after the sync at each log point,
so samples/s is true device throughput, not the launch rate. Time that is not training
(compile, evaluation, pause) is excluded by restarting the interval.

The record also says what the monitor cost: `host_syncs` counts the times the engine made the
host wait for the device since the last record (this log point's sync, evaluations, the end
of a compile, DDP's all-gather), `monitor_s` the engine's time on metrics at the last log
point (building the record after the sync, writing it to the sinks, diagnostics and alerts).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from tuitrain.engine.comm import CommClock
from tuitrain.engine.device import synchronize
from tuitrain.engine.precision import Precision
from tuitrain.engine.ranktime import ForwardClock
from tuitrain.engine.telemetry import Telemetry
from tuitrain.metrics.records import train_record

__all__ = ["IntervalMeter"]


class IntervalMeter:
    """Accumulates one log interval; `record()` syncs once and returns a `train` record."""

    def __init__(
        self,
        device: torch.device,
        precision: Precision,
        world_size: int = 1,
        flops_per_sample: float | None = None,
        peak_tflops: float | None = None,
        metric_names: tuple[str, ...] = (),
        count_tokens: bool = False,
    ) -> None:
        self.device = device
        self.metric_names = metric_names  # the task's own train metrics, summed on the device
        self.count_tokens = count_tokens
        self.flops_per_sample = flops_per_sample
        self.peak_tflops = peak_tflops
        self.host_syncs = 0  # since the last record
        self.monitor_carry_s = 0.0  # the last log point's time after its record was built
        self.precision = precision
        self.world_size = world_size
        self.telemetry = Telemetry(device)
        self.skipped_steps = 0
        self._skipped_dev = torch.zeros((), device=device, dtype=torch.int64)
        self._last_scale: float | None = None
        self.forward_clock: ForwardClock | None = None  # DDP only: the straggler measure
        self.comm_clock: CommClock | None = None  # DDP, FSDP: time in collectives
        self.restart()

    def restart(self) -> None:
        """Begin a new log interval: a fresh loss window and a fresh clock."""
        self._loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        self._metric_sums = {
            name: torch.zeros((), device=self.device, dtype=torch.float32)
            for name in self.metric_names
        }
        self._micro_batches = 0
        self.grad_norm: torch.Tensor | None = None
        self.interval_steps = 0  # optimizer steps since the last record (clock restarts or not)
        self.restart_clock()

    def restart_clock(self) -> None:
        """Restart the throughput clock only (after compile, eval or a pause): that time is
        not training, but the losses of the interval still count."""
        self.samples = 0
        self.tokens = 0
        self.steps = 0
        self.data_wait_s = 0.0
        if self.forward_clock is not None:
            self.forward_clock.reset()
        if self.comm_clock is not None:
            self.comm_clock.reset()
        self._t0 = time.perf_counter()

    def state_dict(self) -> dict[str, Any]:
        """The open interval's loss window and the skip counter (for exact resume)."""
        return {
            "metric_sums": {k: v.detach().cpu().clone() for k, v in self._metric_sums.items()},
            "loss_sum": self._loss_sum.detach().cpu().clone(),
            "micro_batches": self._micro_batches,
            "skipped": self._skipped_dev.detach().cpu().clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loss_sum = state["loss_sum"].to(self.device)
        for name, value in dict(state.get("metric_sums") or {}).items():
            if name in self._metric_sums:
                self._metric_sums[name] = value.to(self.device, torch.float32)
        self._micro_batches = int(state["micro_batches"])
        self._skipped_dev = state["skipped"].to(self.device)
        self.skipped_steps = int(self._skipped_dev.item())

    def add_micro(
        self,
        loss: torch.Tensor,
        batch_size: int,
        metrics: dict[str, torch.Tensor] | None = None,
        tokens: int = 0,
    ) -> None:
        self._loss_sum += loss.detach().float()  # device add: no sync
        for name, value in (metrics or {}).items():
            if name in self._metric_sums:  # a metric the dry step did not see is not recorded
                self._metric_sums[name] += value.to(self.device, torch.float32)
        self._micro_batches += 1
        self.samples += batch_size
        self.tokens += tokens

    def note_scale_before_step(self) -> torch.Tensor | None:
        scale = self.precision.scale_tensor()
        return None if scale is None else scale.clone()

    def note_scale_after_step(self, before: torch.Tensor | None) -> None:
        """A scale decrease means the scaler skipped the optimizer step (inf/NaN grads)."""
        after = self.precision.scale_tensor()
        if before is not None and after is not None:
            self._skipped_dev += (after < before).to(torch.int64)  # stays on the device

    def note_sync(self) -> None:
        """The engine made the host wait for the device (outside this meter's own sync)."""
        self.host_syncs += 1

    def add_monitor_time(self, seconds: float) -> None:
        """Time spent on metrics after the record was built (sinks, diagnostics, DDP merge)."""
        self.monitor_carry_s += seconds

    def record(self, step: int, epoch: float, samples_total: int, lr: float) -> dict[str, Any]:
        synchronize(self.device)  # sync point: the one per log interval
        synced = time.perf_counter()
        wall = max(synced - self._t0, 1e-9)
        loss = (self._loss_sum / max(self._micro_batches, 1)).item()  # sync point (already synced)
        scale_tensor = self.precision.scale_tensor()
        grad_scale = float(scale_tensor.item()) if scale_tensor is not None else None
        self.skipped_steps = int(self._skipped_dev.item())
        self._last_scale = grad_scale
        telemetry = self.telemetry.read()
        grad_norm = float(self.grad_norm.item()) if self.grad_norm is not None else None
        monitor = self.monitor_fields(wall, synced)
        micro = max(self._micro_batches, 1)
        busy_s = None
        if self.forward_clock is not None:  # this rank's own work per step, read after the sync
            busy_s = (self.data_wait_s + self.forward_clock.read()) / max(self.steps, 1)
        comm = self.comm_fields(wall)
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
            telemetry=telemetry,
            grad_scale=grad_scale,
            skipped_steps=self.skipped_steps if self.precision.scaler is not None else None,
            grad_norm=grad_norm,
            monitor=monitor,
            # this rank's; DDP sums across ranks
            tokens_per_s=self.tokens / wall if self.count_tokens else None,
            # already synced: host copies only
            metrics={
                name: float(total.item()) / micro for name, total in self._metric_sums.items()
            },
            busy_s=busy_s,
            comm=comm,
        )
        self.last_loss = loss
        self.host_syncs = 0
        self.monitor_carry_s = 0.0
        self.restart()
        return record

    def comm_fields(self, wall: float) -> dict[str, float | None] | None:
        """Seconds per optimizer step in collectives (and of them exposed: what the step
        waited for, DDP only) and their shares of the step time; None without a clock."""
        if self.comm_clock is None:
            return None
        comm_s, exposed_s = self.comm_clock.read()  # after the sync: its CUDA events are done
        steps = max(self.steps, 1)
        step_time_s = wall / steps
        exposed = None if exposed_s is None else exposed_s / steps
        return {
            "comm_s": comm_s / steps,
            "comm_exposed_s": exposed,
            "comm_frac": min(comm_s / steps / step_time_s, 1.0),
            "comm_exposed_frac": None if exposed is None else min(exposed / step_time_s, 1.0),
        }

    def monitor_fields(self, wall: float, synced: float) -> dict[str, float | int | None]:
        """Achieved TFLOP/s and MFU over the clock's interval (this rank's), and the monitor's
        cost since the last record: its syncs (this one included) and its time."""
        tflops = mfu = None
        if self.flops_per_sample is not None:
            tflops = self.flops_per_sample * self.samples / wall / 1e12
            if self.peak_tflops:
                mfu = tflops / self.peak_tflops
        syncs = self.host_syncs + 1
        monitor_s = self.monitor_carry_s + (time.perf_counter() - synced)
        return {
            "tflops": tflops,
            "mfu": mfu,
            "host_syncs": syncs,
            "syncs_per_step": syncs / max(self.interval_steps, 1),
            "monitor_s": monitor_s,
            "monitor_frac": min(monitor_s / (wall + monitor_s), 1.0),
        }
