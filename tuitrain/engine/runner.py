"""`run(config, sink, control)`: build a run, train it, end it cleanly whatever happens.

Callable from any thread. Every outcome ends with an `end` record and a `RunResult`;
failures become an error event with a hint (and the traceback for our bugs).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

import tuitrain
from tuitrain.core.config import Config
from tuitrain.core.control import Control
from tuitrain.core.errors import EXIT_FAILED, EXIT_OK, TrainingError, UserError
from tuitrain.engine.device import device_name, tf32_active, unused_gpu_warning
from tuitrain.engine.diagnostics import StallWatch
from tuitrain.engine.factory import is_memory_error
from tuitrain.engine.hostmem import frozen_heap
from tuitrain.engine.setup import DistInfo, RunParts, build_parts
from tuitrain.engine.trainer import Trainer
from tuitrain.metrics.alerts import Alert
from tuitrain.metrics.records import end_record, event_record, header_record
from tuitrain.metrics.sinks import Sink
from tuitrain.rundir.layout import RunDir
from tuitrain.rundir.summary import earlier_segments

__all__ = ["RunResult", "run"]


@dataclass(slots=True)
class RunResult:
    status: str  # completed | stopped | failed
    reason: str
    step: int
    exit_code: int
    val_loss: float | None = None
    samples_per_s: float | None = None
    error: BaseException | None = None
    traceback: str = ""
    is_bug: bool = False  # an unexpected exception: show the traceback, not just the sentence
    # per val item (val order) of the last evaluation: classify, right or not (a bool
    # tensor); other tasks, the primary metric per item (floats); None when not per item
    val_correct: torch.Tensor | None = None
    # the last evaluation's metrics (val_loss, each val_<name>) and the task's declaration
    val_metrics: dict[str, float | None] = field(default_factory=dict)
    task_info: dict[str, Any] = field(default_factory=dict)


def engine_header(
    cfg: Config,
    parts: RunParts,
    dist: DistInfo,
    run_dir: Path | None,
    history: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The engine's header record: every field of ENGINE_HEADER_FIELDS, in that order."""
    n_params = sum(t.numel() for t in parts.model.parameters())
    return header_record(
        preset=cfg.name,
        config=cfg.to_dict(),
        device=str(parts.device),
        device_name=device_name(parts.device),
        precision=parts.precision.name,
        # fp32 matmuls/convolutions as TF32 (Ampere+ CUDA with train.tf32): not full fp32
        tf32=tf32_active(parts.device),
        compile=parts.compiled,
        host_malloc=parts.host_malloc,  # retain | system (engine/hostmem.py)
        world_size=dist.world_size,
        torch=torch.__version__,
        tuitrain=tuitrain.__version__,
        python=platform.python_version(),
        time=datetime.now(UTC).isoformat(timespec="seconds"),
        data=parts.data.description,
        train_samples=parts.data.train.num_samples,  # per epoch, on this rank
        val_samples=parts.data.val.num_samples,
        params=n_params,
        global_batch=cfg.data.batch_size * cfg.optim.grad_accum * dist.world_size,
        steps_per_epoch=parts.steps_per_epoch,
        total_steps=parts.total_steps,
        run_dir=str(run_dir) if run_dir else None,
        device_memory_bytes=(
            torch.cuda.get_device_properties(parts.device).total_memory
            if parts.device.type == "cuda"
            else None
        ),
        # forward + backward FLOPs per sample (FlopCounterMode, once); the peak MFU divides by
        flops_per_sample=parts.flops_per_sample,
        peak_tflops=parts.peak.tflops,
        peak_source=parts.peak.source,
        # what is trained: the primary metric, its mode, every metric's goal and format
        task=parts.task_info,
        history=history,  # a resumed run's earlier segments (rundir.summary.earlier_segments)
    )


def gpu_preset_warning(cfg: Config, parts: RunParts) -> tuple[str, str]:
    """(message, hint) for a GPU preset started on a CPU (or MPS): how big an epoch is."""
    size = ""
    if parts.flops_per_sample:
        samples = parts.steps_per_epoch * cfg.data.batch_size * cfg.optim.grad_accum
        tflop = parts.flops_per_sample * samples / 1e12
        size = (
            f" ({tflop:,.0f} TFLOP an epoch)" if tflop >= 100 else f" ({tflop:.3g} TFLOP an epoch)"
        )
    return (
        f"preset {cfg.name} is meant for a GPU{size} and runs on the {parts.device.type.upper()}"
        " here, where an epoch can take hours",
        "run it on a CUDA GPU, or pick fashion-fp32 on this machine",
    )


def run(
    cfg: Config,
    sink: Sink,
    control: Control | None = None,
    *,
    run_dir: Path | None = None,
    dist: DistInfo | None = None,
    resume: dict[str, Any] | None = None,
) -> RunResult:
    """Build and train one run; every outcome ends with an `end` record and a RunResult."""
    control = control or Control()
    dist = dist or DistInfo()
    trainer: Trainer | None = None
    started = time.perf_counter()
    try:
        control.state = "starting"
        parts = build_parts(cfg, dist)
        files = RunDir(run_dir) if run_dir is not None else None  # the run dir, made once
        history = None
        if resume is not None and files is not None and dist.is_main:
            history = earlier_segments(files.metrics)  # read before the header lands
        sink.write(engine_header(cfg, parts, dist, run_dir, history))
        if slow := parts.precision.start_warning():
            message, hint = slow
            sink.write(
                event_record(f"{message}; {hint}", level="warning", kind="precision", hint=hint)
            )
        if cfg.preset.gpu and parts.device.type != "cuda":
            message, hint = gpu_preset_warning(cfg, parts)
            sink.write(
                event_record(f"{message}; {hint}", level="warning", kind="device", hint=hint)
            )
        unused = unused_gpu_warning() if cfg.train.device == "auto" else None
        if unused and parts.device.type == "cpu":
            message, hint = unused
            sink.write(
                event_record(f"{message}; {hint}", level="warning", kind="device", hint=hint)
            )
        trainer = Trainer(cfg, parts, sink, control, dist, files)
        if resume is not None:
            from tuitrain.engine.state import restore, world_size_change

            warning = restore(trainer, resume)
            sink.write(
                event_record(
                    f"resumed at step {trainer.step} (epoch {trainer.epoch}, "
                    f"step {trainer.epoch_step} of it)",
                    kind="resume",
                    step=trainer.step,
                )
            )
            if warning:
                sink.write(event_record(warning, level="warning", kind="resume_inexact"))
            if change := world_size_change(trainer, resume):
                sink.write(event_record(change, level="warning", kind="resume_world_size"))
            if trainer.step >= parts.total_steps:
                sink.write(
                    event_record(
                        f"nothing left to train: the checkpoint is at step {trainer.step} and "
                        f"this run ends at step {parts.total_steps}; raise --max-steps or "
                        "--epochs to go on",
                        level="warning",
                        kind="resume_done",
                        step=trainer.step,
                    )
                )
        watch = rank_watch(cfg, trainer, sink, started)
        with StallWatch(control, trainer.diagnostics, cfg.alerts.stall_s), watch, frozen_heap():
            status = trainer.fit()
        trainer.profiler.close(sink)  # a profile the run's end cut short: what it has
    except BaseException as exc:  # noqa: BLE001 - every failure must end the run cleanly
        return fail(exc, sink, control, trainer, started)
    finally:
        if trainer is not None:
            trainer.profiler.close()
            trainer.diagnostics.close()  # on_alert commands still running: their time limit
    reason = control.stop_reason if status == "stopped" else "reached the configured steps/epochs"
    code = control.exit_code or EXIT_OK
    if lost := no_checkpoint_kept(trainer):
        status, reason, code = "failed", f"{reason}, but {lost}", code or EXIT_FAILED
        sink.write(event_record(lost, level="error", kind="failed", hint=""))
    control.state = status
    result = RunResult(
        status,
        reason,
        trainer.step,
        code,
        trainer.val_loss,
        mean(trainer.throughputs),
        val_correct=trainer.val_correct,
        val_metrics=dict(trainer.val_metrics),
        task_info=trainer.parts.task_info,
    )
    with control.critical():  # a second signal lets the end record be written, whole
        digest = weights_digest(trainer.strategy.model_state_dict(everywhere=True))
        sink.write(run_end_record(result, trainer, started, weights_digest=digest))
        sink.flush()
    return result


def rank_watch(
    cfg: Config, trainer: Trainer, sink: Sink, started: float
) -> contextlib.AbstractContextManager[Any]:
    """With more than one rank, the stalled-rank watch around the loop (engine/rankwatch.py);
    rank 0 first says when its bound cannot come before the collective's timeout."""
    import torch.distributed as torch_dist

    from tuitrain.engine.rankwatch import RankWatch, watch_store

    dist, alerts = trainer.dist, cfg.alerts
    if dist.world_size == 1 or alerts.stalled_rank == "off" or not torch_dist.is_initialized():
        return contextlib.nullcontext()
    timeout = cfg.distributed.timeout_s
    if dist.is_main and alerts.stalled_rank_s >= timeout:
        sink.write(
            event_record(
                f"alerts.stalled_rank_s = {alerts.stalled_rank_s:g} is not below "
                f"distributed.timeout_s = {timeout:g}: a stuck collective times out before a "
                "stalled rank can be named; lower alerts.stalled_rank_s or raise "
                "distributed.timeout_s",
                level="warning",
                kind="config",
            )
        )

    def raise_alert(message: str, figures: dict[str, Any], step: int | None) -> None:
        alert = Alert("stalled_rank", alerts.stalled_rank, message, figures)
        trainer.diagnostics.raise_alert(alert, step)

    def leave(reason: str) -> None:
        """From the watch thread, the loop stuck: this rank's end record, then exit 1."""
        result = RunResult("failed", reason, trainer.step, EXIT_FAILED)
        with contextlib.suppress(Exception):  # best effort: the process ends either way
            sink.write(event_record(reason, level="error", kind="failed", hint=""))
            sink.write(run_end_record(result, trainer, started))
            sink.flush()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(EXIT_FAILED)

    files = trainer.files
    return RankWatch(
        watch_store(files.path if files is not None else None),
        dist.rank,
        dist.world_size,
        trainer.progress,
        trainer.control,
        stacks=files.stacks if files is not None else None,
        action=alerts.stalled_rank,
        floor_s=alerts.stalled_rank_s,
        factor=alerts.stalled_rank_factor,
        raise_alert=raise_alert,
        leave=leave,
        # the dashboard's engine runs in a thread: ending the process would take the UI along
        may_leave=threading.current_thread() is threading.main_thread(),
        nccl=trainer.parts.device.type == "cuda",
    )


def no_checkpoint_kept(trainer: Trainer) -> str:
    """'' unless checkpoint writes failed and the run ends with none on disk: the sentence
    that says so (the run's training is lost; a full disk is not a success)."""
    from tuitrain.engine.checkpoint import list_checkpoints

    failure, files = trainer.checkpoint_failure, trainer.files
    if failure is None or files is None or not trainer.dist.is_main:
        return ""
    if list_checkpoints(files.checkpoints):
        return ""
    return (
        f"no checkpoint was kept: every checkpoint write failed ({failure}); free space "
        f"where {files.checkpoints} lies, or pass --run-dir on another disk, and rerun"
    )


def weights_digest(state: dict[str, Any] | torch.nn.Module) -> str:
    """A short sha256 of the final weights (a model, or its whole state dict: the strategy's,
    so sharded weights are digested whole): equal digests = bit-identical models."""
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()[:16]


def fail(
    exc: BaseException, sink: Sink, control: Control, trainer: Trainer | None, started: float
) -> RunResult:
    """Turn an exception into an error event, an end record and a failed RunResult."""
    if trainer is not None:  # a CUDA OOM writes a memory snapshot; any failure ends a recording
        with contextlib.suppress(Exception):
            if isinstance(exc, torch.OutOfMemoryError):
                trainer.memory.on_oom(trainer.step + 1, sink)
            trainer.memory.stop()
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        # SystemExit: a second Ctrl-C or SIGTERM (tuitrain.host.signals) means "leave now". The
        # last checkpoint stays as it was; an end record says how the run ended (best effort).
        if isinstance(exc, SystemExit) and isinstance(exc.code, int):
            reason = f"{control.stop_reason or 'stopped'}; a second signal left mid-step"
            result = RunResult("stopped", reason, trainer.step if trainer else 0, exc.code)
            control.state = "stopped"  # from here on the signal handler ignores more signals
            with contextlib.suppress(Exception):
                sink.write(run_end_record(result, trainer, started))
                sink.flush()
        raise exc
    step = trainer.step if trainer else 0
    message, hint, is_bug = describe_failure(exc, trainer)
    tb = "" if isinstance(exc, UserError) else traceback.format_exc()
    sink.write(
        event_record(
            message + (f" ({hint})" if hint else ""),
            level="error",
            kind="failed",
            hint=hint,
            traceback=tb or None,
        )
    )
    # A failure checkpoint keeps trained weights; before the first step of this process (a
    # refused resume, a bad model or data) it would only hold fresh or half-restored weights
    # and move `latest` away from the checkpoint the user meant.
    sound = (
        trainer is not None
        and trainer.state_sound
        and trainer.parts is not None
        and trainer.fitting
        and trainer.step > trainer.start_step
    )
    if (
        sound
        and trainer is not None
        and not isinstance(exc, (TrainingError, torch.OutOfMemoryError))
    ):
        with contextlib.suppress(Exception):  # best effort: the failure is what we report
            trainer.save("failure")
    code = getattr(exc, "exit_code", EXIT_FAILED)
    result = RunResult("failed", message, step, code, error=exc, traceback=tb, is_bug=is_bug)
    sink.write(run_end_record(result, trainer, started))
    control.state = "failed"
    release(trainer)
    return result


def describe_failure(exc: BaseException, trainer: Trainer | None) -> tuple[str, str, bool]:
    """(one-sentence message, hint, is it our bug?) for a failure."""
    if isinstance(exc, TrainingError):
        return str(exc), exc.hint, False
    if isinstance(exc, UserError):
        return str(exc), "", False
    if isinstance(exc, torch.OutOfMemoryError):
        step = trainer.step + 1 if trainer else 0
        batch = trainer.batch_size if trainer else "?"
        return (
            f"out of memory at step {step} (batch {batch})",
            "try a smaller data.batch_size with optim.grad_accum=2 or more, "
            "--precision bf16 or fp16, or model.channels_last=false",
            False,
        )
    if is_memory_error(exc):  # the CPU allocator (or Python) refused: host memory, same policy
        wanted = re.search(r"allocate (\d+) bytes", str(exc))
        size = f" ({int(wanted[1]) / 2**30:.1f} GiB at once)" if wanted else ""
        if trainer is None:  # building the data or the model
            return (
                f"out of host memory while building the data and the model{size}",
                "lower data.image_size, data.train_samples or data.val_samples, "
                "or use a smaller model",
                False,
            )
        return (
            f"out of host memory at step {trainer.step + 1} (batch {trainer.batch_size}){size}",
            "try a smaller data.batch_size with optim.grad_accum=2 or more, "
            "a smaller data.image_size or a smaller model",
            False,
        )
    if isinstance(exc, torch.distributed.DistError) or "gloo" in str(exc).lower():
        step = trainer.step if trainer else 0
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        stopped = trainer.control.stop_reason if trainer else ""
        if trainer and stopped.startswith("stopped by alert stalled_rank"):  # peers ended
            stacks = trainer.files.stacks if trainer.files else "the run dir's stacks"
            return (
                f"{stopped}; every rank was ended after step {step}",
                f"every rank's Python stacks are in {stacks}/",
                False,
            )
        return (
            f"lost contact with another rank after step {step} ({first})",
            "a rank died or hung: see its rank-N.log in the run dir; the wait is bounded by "
            "distributed.timeout_s",
            False,
        )
    return (
        f"{type(exc).__name__}: {exc}",
        "this looks like a bug; the traceback is in the log",
        True,
    )


def release(trainer: Trainer | None) -> None:
    """Drop the run's tensors so a failed run does not pin device memory (UI stays alive)."""
    if trainer is not None:
        trainer.parts.optimizer.zero_grad(set_to_none=True)
        trainer.parts = None  # type: ignore[assignment]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_end_record(
    result: RunResult, trainer: Trainer | None, started: float, weights_digest: str | None = None
) -> dict[str, Any]:
    """The engine's end record: its totals, the task's primary metric and the validation
    loss as the result has them (null when the run failed), the last evaluation's other
    metrics, and `weights_digest` (last) when the run trained to its end."""
    digest: dict[str, Any] = {} if weights_digest is None else {"weights_digest": weights_digest}
    primary = getattr(trainer, "primary", None)  # the task's, from its declaration
    metrics: dict[str, Any] = {primary: result.val_metrics.get(primary)} if primary else {}
    metrics["val_loss"] = result.val_loss
    for key, value in getattr(trainer, "val_metrics", {}).items():
        metrics.setdefault(key, value)
    return end_record(
        result.status,
        result.reason,
        result.step,
        samples=trainer.samples if trainer else 0,
        elapsed_s=round(time.perf_counter() - started, 3),
        mean_samples_per_s=result.samples_per_s,
        **metrics,
        **digest,
    )


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
