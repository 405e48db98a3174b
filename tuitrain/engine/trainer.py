"""The training loop: `run(config, sink, control)`, callable from any thread.

It writes records into a sink (never UI code) and reads commands from the control object at
step boundaries. The step in `Trainer.train_step` reads top to bottom: forward under
autocast, loss, scaled backward, unscale, clip, step/update, zero_grad.
"""

from __future__ import annotations

import math
import platform
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

import tuitrain
from tuitrain.config import Config
from tuitrain.engine.control import Control
from tuitrain.engine.device import device_name, synchronize
from tuitrain.engine.meter import SCALE_FLOOR, IntervalMeter, data_wait_verdict
from tuitrain.engine.profiling import StepProfiler
from tuitrain.engine.setup import DistInfo, RunParts, build_parts
from tuitrain.errors import EXIT_FAILED, EXIT_OK, TrainingError, UserError
from tuitrain.metrics.sinks import Sink


@dataclass(slots=True)
class RunResult:
    status: str  # completed | stopped | failed
    reason: str
    step: int
    exit_code: int
    val_acc: float | None = None
    val_loss: float | None = None
    samples_per_s: float | None = None
    error: BaseException | None = None
    traceback: str = ""


def event(
    message: str, level: str = "info", kind: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {"type": "event", "level": level, "message": message, "kind": kind, **extra}


class Trainer:
    """Owns the parts of one run and the loop state (step, epoch, position in the epoch)."""

    def __init__(
        self,
        cfg: Config,
        parts: RunParts,
        sink: Sink,
        control: Control,
        dist: DistInfo,
        run_dir: Path | None,
    ) -> None:
        self.cfg, self.parts, self.sink, self.control = cfg, parts, sink, control
        self.dist, self.run_dir = dist, run_dir
        self.criterion = nn.CrossEntropyLoss()
        self.meter = IntervalMeter(parts.device, parts.precision, dist.world_size)
        self.profiler = StepProfiler(parts.device, run_dir)
        self.step = 0
        self.epoch = 0
        self.samples = 0
        self.val_acc: float | None = None
        self.val_loss: float | None = None
        self.throughputs: list[float] = []
        # NaN checks need the loss on the host: free on CPU, a sync on CUDA, so there the
        # check runs at log points only.
        self.check_every_step = parts.device.type == "cpu"
        self.batch_size = cfg.data.batch_size
        if cfg.train.profile_steps:
            self.profiler.request(cfg.train.profile_steps)

    # ---------------------------------------------------------------- the step
    def train_step(self, batches: Any, need_grad_norm: bool) -> None:
        p, model, optimizer = self.parts, self.parts.train_model, self.parts.optimizer
        accum = self.cfg.optim.grad_accum
        for _micro in range(accum):
            t0 = time.perf_counter()
            x, y = next(batches)  # the time blocked here is the data wait
            self.meter.data_wait_s += time.perf_counter() - t0
            with p.precision.autocast():
                logits = model(x)
                loss = self.criterion(logits, y)
            if self.check_every_step and not torch.isfinite(loss):
                raise self.nonfinite_loss(loss)
            p.precision.scale(loss / accum).backward()
            self.meter.add_micro(loss, x.shape[0])
        if need_grad_norm or self.cfg.optim.grad_clip > 0:
            p.precision.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            max_norm = self.cfg.optim.grad_clip or math.inf
            self.meter.grad_norm = nn.utils.clip_grad_norm_(p.model.parameters(), max_norm)
        scale_before = self.meter.note_scale_before_step()
        p.precision.step(optimizer)  # fp16: skipped on inf/NaN grads, then scale update
        self.meter.note_scale_after_step(scale_before)
        optimizer.zero_grad(set_to_none=True)
        self.lr = p.scheduler.get_last_lr()[0]  # the rate this step used (a Python float)
        p.scheduler.step()
        self.meter.steps += 1

    def nonfinite_loss(self, loss: torch.Tensor) -> TrainingError:
        return TrainingError(
            f"the loss is {loss.item()} at step {self.step + 1}; stopped before the optimizer step",
            hint="lower optim.lr, set optim.grad_clip (e.g. 1.0), or use --precision bf16/fp32",
            step=self.step + 1,
        )

    # ---------------------------------------------------------------- the loop
    def fit(self) -> str:
        """Train until max_steps, the last epoch or a stop request; returns the end status."""
        p = self.parts
        self.control.state = "compiling" if p.compiled else "running"
        if p.compiled:
            self.sink.write(
                event("compiling the model with torch.compile (first step)", kind="compile")
            )
        while self.epoch < self.cfg.train.epochs and self.step < p.total_steps:
            status = self.run_epoch()
            if status != "completed":
                return status
        return "completed"

    def run_epoch(self) -> str:
        p = self.parts
        batches = iter(p.data.train.batches(self.epoch))
        for _ in range(p.steps_per_epoch):
            if self.control.stop_requested:
                return "stopped"
            if self.control.paused:
                self.pause()
            if self.control.stop_requested:
                return "stopped"
            if self.step >= p.total_steps:
                return "completed"
            self.one_step(batches)
        self.epoch += 1
        if self.cfg.train.eval_every_epoch or self.step >= p.total_steps:
            self.evaluate()
        return "completed"

    def one_step(self, batches: Any) -> None:
        p = self.parts
        log_every = self.cfg.train.log_every
        is_log = (self.step + 1) % log_every == 0 or self.step + 1 == p.total_steps
        first = self.step == 0 and p.compiled
        self.profiler.maybe_start(self.control.take_profile_request() or None, self.step)
        self.train_step(batches, need_grad_norm=is_log)
        self.step += 1
        self.samples += self.batch_size * self.cfg.optim.grad_accum * self.dist.world_size
        self.profiler.after_step(self.sink)
        if self.cfg.train.pace_s:
            time.sleep(self.cfg.train.pace_s)
        if first:
            self.compile_done()
        elif is_log:
            self.log_point()

    def compile_done(self) -> None:
        synchronize(self.parts.device)  # sync point: the compile time is measured to here
        seconds = time.perf_counter() - self.meter._t0
        self.sink.write(
            event(
                f"torch.compile done in {seconds:.1f} s (first step, not counted in throughput)",
                kind="compile_done",
                seconds=round(seconds, 2),
            )
        )
        self.control.state = "running"
        self.meter.restart()

    def log_point(self) -> None:
        record = self.meter.record(self.step, self.fractional_epoch(), self.samples, self.lr)
        if record["loss"] is None:
            raise TrainingError(
                f"the loss became NaN or Inf before step {self.step}",
                hint="lower optim.lr, set optim.grad_clip (e.g. 1.0), or use --precision bf16/fp32",
                step=self.step,
            )
        self.sink.write(record)
        self.throughputs.append(record["samples_per_s"])
        self.diagnose(record)

    def diagnose(self, record: dict[str, Any]) -> None:
        verdict, hint = data_wait_verdict(record["data_wait_frac"])
        if (
            verdict != "ok"
            and self.step // self.cfg.train.log_every in (1, 2)
            or (verdict == "input-bound" and self.step % (self.cfg.train.log_every * 50) == 0)
        ):
            pct = 100 * record["data_wait_frac"]
            kind = "input_bound" if verdict == "input-bound" else "data_wait"
            self.sink.write(
                event(
                    f"data wait {pct:.0f}% of step time ({verdict}): {hint}",
                    level="warning",
                    kind=kind,
                )
            )
        scale = record["grad_scale"]
        if scale is not None and scale < SCALE_FLOOR:
            self.sink.write(
                event(
                    f"GradScaler scale collapsed to {scale:g} "
                    f"(skipped {record['skipped_steps']} steps): "
                    "gradients overflow fp16 again and again; try --precision bf16 or a lower lr",
                    level="warning",
                    kind="overflow",
                )
            )

    def fractional_epoch(self) -> float:
        return self.step / self.parts.steps_per_epoch

    def pause(self) -> None:
        self.control.state = "paused"
        self.sink.write(event(f"paused at step {self.step}", kind="pause"))
        self.control.wait_while_paused()
        self.control.state = "running"
        if not self.control.stop_requested:
            self.sink.write(event(f"resumed at step {self.step}", kind="resume"))
        self.meter.restart()  # paused time is not training time

    # ---------------------------------------------------------------- evaluation
    def evaluate(self) -> None:
        """Validation loss and accuracy under inference_mode; one sync at the end."""
        p = self.parts
        self.control.state = "evaluating"
        p.train_model.eval()
        loss_sum = torch.zeros((), device=p.device)
        correct = torch.zeros((), device=p.device, dtype=torch.int64)
        count = 0
        with torch.inference_mode(), p.precision.autocast():
            for x, y in p.data.val.batches(0):
                logits = p.train_model(x)
                loss_sum += nn.functional.cross_entropy(logits.float(), y, reduction="sum")
                correct += (logits.argmax(dim=1) == y).sum()
                count += y.shape[0]
        p.train_model.train()
        self.val_loss = loss_sum.item() / max(count, 1)  # sync point: once per evaluation
        self.val_acc = correct.item() / max(count, 1)
        self.sink.write(
            {
                "type": "eval",
                "step": self.step,
                "epoch": round(self.fractional_epoch(), 4),
                "val_loss": self.val_loss,
                "val_acc": self.val_acc,
            }
        )
        self.control.state = "running"
        self.meter.restart()  # evaluation time is not training throughput


def header_record(
    cfg: Config, parts: RunParts, dist: DistInfo, run_dir: Path | None
) -> dict[str, Any]:
    n_params = sum(t.numel() for t in parts.model.parameters())
    return {
        "type": "header",
        "preset": cfg.name,
        "config": cfg.to_dict(),
        "device": str(parts.device),
        "device_name": device_name(parts.device),
        "precision": parts.precision.name,
        "compile": parts.compiled,
        "world_size": dist.world_size,
        "torch": torch.__version__,
        "tuitrain": tuitrain.__version__,
        "python": platform.python_version(),
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "data": parts.data.description,
        "params": n_params,
        "global_batch": cfg.data.batch_size * cfg.optim.grad_accum * dist.world_size,
        "steps_per_epoch": parts.steps_per_epoch,
        "total_steps": parts.total_steps,
        "run_dir": str(run_dir) if run_dir else None,
    }


def run(
    cfg: Config,
    sink: Sink,
    control: Control | None = None,
    *,
    run_dir: Path | None = None,
    dist: DistInfo | None = None,
) -> RunResult:
    """Build and train one run; every outcome ends with an `end` record and a RunResult."""
    control = control or Control()
    dist = dist or DistInfo()
    trainer: Trainer | None = None
    started = time.perf_counter()
    try:
        control.state = "starting"
        parts = build_parts(cfg, dist)
        sink.write(header_record(cfg, parts, dist, run_dir))
        trainer = Trainer(cfg, parts, sink, control, dist, run_dir)
        status = trainer.fit()
    except BaseException as exc:  # noqa: BLE001 - every failure must end the run cleanly
        return fail(exc, sink, control, trainer, started)
    reason = control.stop_reason if status == "stopped" else "reached the configured steps/epochs"
    control.state = status
    result = RunResult(
        status,
        reason,
        trainer.step,
        control.exit_code or EXIT_OK,
        trainer.val_acc,
        trainer.val_loss,
        mean(trainer.throughputs),
    )
    sink.write(end_record(result, trainer, started))
    return result


def fail(
    exc: BaseException, sink: Sink, control: Control, trainer: Trainer | None, started: float
) -> RunResult:
    """Turn an exception into an error event, an end record and a failed RunResult."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    step = trainer.step if trainer else 0
    message, hint = describe_failure(exc, trainer)
    tb = "" if isinstance(exc, UserError) else traceback.format_exc()
    sink.write(
        event(
            message + (f" ({hint})" if hint else ""),
            level="error",
            kind="failed",
            hint=hint,
            traceback=tb or None,
        )
    )
    code = getattr(exc, "exit_code", EXIT_FAILED)
    result = RunResult("failed", message, step, code, error=exc, traceback=tb)
    sink.write(end_record(result, trainer, started))
    control.state = "failed"
    release(trainer)
    return result


def describe_failure(exc: BaseException, trainer: Trainer | None) -> tuple[str, str]:
    if isinstance(exc, TrainingError):
        return str(exc), exc.hint
    if isinstance(exc, UserError):
        return str(exc), ""
    if isinstance(exc, torch.OutOfMemoryError):
        step = trainer.step + 1 if trainer else 0
        batch = trainer.batch_size if trainer else "?"
        return (
            f"out of memory at step {step} (batch {batch})",
            "try a smaller data.batch_size with optim.grad_accum=2 or more, "
            "--precision bf16 or fp16, or model.channels_last=false",
        )
    return f"{type(exc).__name__}: {exc}", "this looks like a bug; the traceback is in the log"


def release(trainer: Trainer | None) -> None:
    """Drop the run's tensors so a failed run does not pin device memory (UI stays alive)."""
    if trainer is not None:
        trainer.parts.optimizer.zero_grad(set_to_none=True)
        trainer.parts = None  # type: ignore[assignment]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def end_record(result: RunResult, trainer: Trainer | None, started: float) -> dict[str, Any]:
    return {
        "type": "end",
        "status": result.status,
        "reason": result.reason,
        "step": result.step,
        "samples": trainer.samples if trainer else 0,
        "elapsed_s": round(time.perf_counter() - started, 3),
        "mean_samples_per_s": result.samples_per_s,
        "val_acc": result.val_acc,
        "val_loss": result.val_loss,
    }


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
