"""The fp32-vs-mixed precision parity check (the seeds, article 000).

Train the same model twice, once in float32 and once in mixed precision (bf16 or fp16), with
identical initial weights, batch order and seed, and compare validation accuracy per epoch: a
gap above 0.5 point means the mixed run is not the same training (often a custom layer or a
loss working on tiny numbers). `parity()` runs in the engine's thread, like `run()`:

1. early check: both precisions for the first `early_steps` steps with the loss logged every
   step, then stopped; the largest relative loss difference is a warning within seconds;
2. the fp32 run, then the mixed run: two full `run()` calls whose records are tagged
   `"run": "fp32" | "mixed"` (`ParityStores` routes them into one MetricStore per run);
3. the verdict: PASS (|gap| <= 0.5 point) or FAIL; ERROR when a run failed; none when
   cancelled. Its noise: the last evaluations of both runs paired image by image (the
   images only one run got right, an exact McNemar p-value, a paired 95% interval of the
   gap), and one sentence when the verdict and the noise disagree. A last `event` (kind
   "parity", phase "done") carries the whole result, and `parity.json` is written into the
   run dir.

Identical starts need no hook: `build_parts` seeds everything from `train.seed` before it
builds the model, and the batch order depends only on (seed, epoch), never on the precision.

The check runs in one process: distributed.strategy (ddp, fsdp) is ignored there, as by
any one-process run, so it measures the precision's autocast, not FSDP's MixedPrecisionPolicy
(which also gathers the weights in the low dtype). Launched as a rank of a multi-process job
(torchrun) it is refused: each rank would run the whole check into the same run dir.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, cast

import torch

from tuitrain.core.config import Config
from tuitrain.core.control import Control
from tuitrain.core.errors import UserError
from tuitrain.engine.device import device_name, resolve_device
from tuitrain.engine.distributed import env_dist_info
from tuitrain.engine.precision import resolve_precision
from tuitrain.engine.runner import RunResult, run
from tuitrain.metrics.parity_report import (
    EARLY_STEPS,
    EARLY_WARN_REL_DIFF,
    MIXED_CHOICES,
    RUNS,
    EpochRow,
    MetricParity,
    PairedCounts,
    ParityResult,
    control_verdict,
    count_test_images,
    gap_ci95_points,
    max_rel_diff,
    paired_mean_ci,
    write_parity_json,
)
from tuitrain.metrics.records import (
    CLASSIFY_PRIMARY,
    event_record,
    tagged,
    task_declaration,
)
from tuitrain.metrics.sinks import NullSink, Sink
from tuitrain.rundir.layout import RunDir

# --------------------------------------------------------------------------- configs


MixedPrecision = Literal["bf16", "fp16"]  # MIXED_CHOICES


def resolve_mixed(cfg: Config, mixed: str | None = None) -> MixedPrecision:
    """The mixed precision to compare: `mixed`, else the preset's bf16/fp16, else auto."""
    if mixed is not None and mixed not in MIXED_CHOICES:
        raise UserError(f"--mixed {mixed!r} is not a mixed precision; choose bf16 or fp16.")
    device = resolve_device(cfg.train.device)
    wanted = mixed or (cfg.train.precision if cfg.train.precision in MIXED_CHOICES else "auto")
    name = resolve_precision(wanted, device)
    if name not in MIXED_CHOICES:
        where = device_name(device) if device.type == "cpu" else device.type
        uses = "fp32 ('auto' here)" if cfg.train.precision == "auto" else cfg.train.precision
        raise UserError(
            f"no native mixed precision on this {where}: preset {cfg.name} runs {uses}, and "
            "bf16 or fp16 would be emulated (slow); compare anyway with --mixed bf16 (in the "
            "dashboard: a bf16 preset, key p), or run on a GPU."
        )
    return cast(MixedPrecision, name)  # one of MIXED_CHOICES, checked just above


def parity_configs(cfg: Config, epochs: int, mixed: MixedPrecision) -> dict[str, Config]:
    """The two configs: identical but for the precision (the fp32 one without TF32), with
    `epochs`, an evaluation per epoch, and no profiling or checkpoints.

    A step cap (train.max_steps) would end a run mid-epoch, without an evaluation; parity
    needs one per epoch, so the cap becomes a shorter epoch: the first
    ceil(max_steps / epochs) batches' worth of training samples.
    """
    train = replace(cfg.train, epochs=epochs, eval_every_epoch=True, max_steps=0, profile_steps=0)
    data = cfg.data
    if cfg.train.max_steps:
        per_epoch = math.ceil(cfg.train.max_steps / epochs)
        samples = per_epoch * cfg.data.batch_size * cfg.optim.grad_accum
        data = replace(data, train_samples=min(data.train_samples or samples, samples))
    # two throwaway trainings: no checkpoints (they would also cost time between epochs)
    checkpoint = replace(cfg.checkpoint, every_steps=0, at_epoch_end=False, on_stop=False)
    base = replace(cfg, train=train, data=data, checkpoint=checkpoint)
    return {
        "fp32": replace(base, train=replace(train, precision="fp32", tf32=False)),
        "mixed": replace(base, train=replace(train, precision=mixed)),
    }


def pair_images(fp32: torch.Tensor | None, mixed: torch.Tensor | None) -> PairedCounts | None:
    """Both runs' final evaluations image by image (the same val images in the same order:
    the val set is never shuffled, and runs single-process here); None without both."""
    if fp32 is None or mixed is None or fp32.shape != mixed.shape:
        return None
    f, m = fp32.to("cpu", torch.bool), mixed.to("cpu", torch.bool)
    both, fp32_only, mixed_only = (int(t.sum()) for t in (f & m, f & ~m, m & ~f))
    return PairedCounts(both, fp32_only, mixed_only, f.numel() - both - fp32_only - mixed_only)


# --------------------------------------------------------------------------- sinks, controls


class RunRecorder(Sink):
    """Tags one run's records with `"run"` (and `"early": true` in the early check), passes
    them on, and keeps what the result needs; can stop the run after `stop_after` steps."""

    def __init__(
        self, sink: Sink, run_name: str, *, early: bool = False, stop_after: int = 0,
        control: Control | None = None,
    ) -> None:  # fmt: skip
        self.sink, self.run_name, self.early = sink, run_name, early
        self.stop_after, self.control = stop_after, control
        self.header: Mapping[str, Any] | None = None
        self.losses: list[tuple[int, float]] = []
        self.evals: list[Mapping[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == "header":
            self.header = record
        elif kind == "train" and record.get("loss") is not None:
            self.losses.append((int(record["step"]), float(record["loss"])))
        elif kind == "eval":
            self.evals.append(record)
        self.sink.write(tagged(record, self.run_name, self.early))
        if self.stop_after and kind == "train" and record["step"] >= self.stop_after:
            assert self.control is not None
            self.control.request_stop("early check done")

    def flush(self) -> None:
        self.sink.flush()


class _ProbeControl(Control):
    """The early check's control: stopped after its steps, or when the parity is cancelled;
    pauses with the parity's control and shows its state there."""

    def __init__(self, parent: Control) -> None:
        self.parent = parent
        super().__init__()

    @property  # type: ignore[override]
    def state(self) -> str:
        return self.parent.state

    @state.setter
    def state(self, value: str) -> None:
        self.parent.state = value

    @property
    def stop_requested(self) -> bool:
        return super().stop_requested or self.parent.stop_requested

    @property
    def paused(self) -> bool:
        return self.parent.paused

    def wait_while_paused(self, poll_s: float = 0.1) -> None:
        self.parent.wait_while_paused(poll_s)


# --------------------------------------------------------------------------- the check


def parity(
    cfg: Config,
    epochs: int = 3,
    mixed: str | None = None,
    *,
    sink: Sink | None = None,
    control: Control | None = None,
    run_dir: Path | None = None,
    early_steps: int = EARLY_STEPS,
    with_control: bool | str = "auto",
) -> ParityResult:
    """Run the parity check; bad input raises UserError, everything else is in the result.
    `with_control`: a third run, fp32 with seed + 1, measures how far changing the seed
    alone moves the metric (the noise the mixed run's gap is judged against): "on" (or
    True), "off" (or False), or "auto": only when the verdict is FAIL (where the seed's own
    noise could be the explanation; a PASS costs no third run)."""
    mode = ("on" if with_control else "off") if isinstance(with_control, bool) else with_control
    if env_dist_info().world_size > 1:
        raise UserError(
            "tuitrain parity runs in one process (both runs on one device), not as a rank of "
            f"a {env_dist_info().world_size}-process job; run it without torchrun or --nproc."
        )
    if mode not in ("on", "off", "auto"):
        raise UserError(f"--control {with_control!r} is not valid; choose on, off or auto.")
    if epochs < 1:
        raise UserError(f"--epochs {epochs} is out of range; parity needs at least 1 epoch.")
    if early_steps < 0:
        raise UserError(f"early_steps = {early_steps} must be >= 0.")
    mixed = resolve_mixed(cfg, mixed)
    result = ParityResult(
        preset=cfg.name, mixed=mixed, device=str(resolve_device(cfg.train.device)),
        epochs=epochs, seed=cfg.train.seed, early_steps=early_steps,
    )  # fmt: skip
    if cfg.task.name == "classify" and cfg.task.tolerance > 0:
        result.threshold_points = 100.0 * cfg.task.tolerance  # accuracy's units: a fraction
    configs = parity_configs(cfg, epochs, mixed)
    if mode != "off":
        fp32 = configs["fp32"]
        seed = (cfg.train.seed + 1) % 2**32
        configs["control"] = replace(fp32, train=replace(fp32.train, seed=seed))
    check = _Check(result, configs, sink or NullSink(), control)
    check.control_mode = mode
    return check.execute(run_dir, early_steps)


def control_result(
    r: ParityResult,
    cfg: Config,
    evals: dict[str, list[Mapping[str, Any]]],
    items: dict[str, torch.Tensor | None],
) -> dict[str, Any] | None:
    """The control run against the fp32 run: its value, the gap fp32 - control with its
    interval, and whether mixed precision moved the metric more than the seed did."""
    classify = r.metric is None
    key = CLASSIFY_PRIMARY if r.metric is None else r.metric.name
    fp32 = evals["fp32"][-1].get(key) if evals.get("fp32") else None
    ctrl = evals["control"][-1].get(key) if evals.get("control") else None
    if not isinstance(fp32, (int, float)) or not isinstance(ctrl, (int, float)):
        return None
    scale = 100.0 if classify else 1.0
    gap = (fp32 - ctrl) * scale
    ci: list[float] | None = None
    if classify:
        counts = pair_images(items.get("fp32"), items.get("control"))
        ci = gap_ci95_points(counts, gap) if counts is not None and counts.n else None
    else:
        a, b = items.get("fp32"), items.get("control")
        if a is not None and b is not None and a.shape == b.shape and a.dim() == 1:
            ci = paired_mean_ci(a.float().cpu().tolist(), b.float().cpu().tolist())
    mixed_gap = r.gap_points if r.metric is None else r.metric.gap
    verdict, beyond = None, None
    if mixed_gap is not None:  # the sentence and the claim: metrics.parity_report's
        mixed_ci = r.gap_ci95_points if r.metric is None else r.metric.ci95
        mode = "max" if r.metric is None else r.metric.mode
        verdict, beyond = control_verdict(
            r.mixed, key, mode, classify, mixed_gap, mixed_ci, gap, ci
        )
    return {
        "seed": cfg.train.seed,
        "metric": key,
        "value": ctrl,
        "gap": gap,
        "gap_ci95": ci,
        "unit": "points" if classify else "the metric's units",
        "mixed_gap": mixed_gap,
        "mixed_beyond_seed": beyond,  # True only when the intervals say so; None: not shown
        "verdict": verdict,
    }


DEFAULT_RELATIVE_TOLERANCE = 0.01  # a task that sets none: 1% of the fp32 run's value


def metric_parity(
    cfg: Config,
    header: Mapping[str, Any] | None,
    evals: dict[str, list[Mapping[str, Any]]],
    items: dict[str, torch.Tensor | None],
) -> MetricParity | None:
    """The primary metric's parity for a task other than classify (None for classify)."""
    if cfg.task.name == "classify":
        return None
    task = task_declaration(header)
    name = task["primary"] or "val_loss"
    per_epoch = [
        (a.get(name), b.get(name)) for a, b in zip(evals["fp32"], evals["mixed"], strict=False)
    ]
    fp32, mixed = per_epoch[-1] if per_epoch else (None, None)
    if cfg.task.tolerance > 0:
        tolerance, source = cfg.task.tolerance, "task.tolerance"
    elif task["tolerance"]:
        tolerance, source = float(task["tolerance"]), "the task's own tolerance"
    else:
        base = abs(fp32) if isinstance(fp32, (int, float)) and fp32 else 1.0
        tolerance = DEFAULT_RELATIVE_TOLERANCE * base
        source = f"default: {DEFAULT_RELATIVE_TOLERANCE:.0%} of the fp32 value"
    m = MetricParity(
        name, task["mode"], tolerance, source, fp32, mixed,
        per_epoch=[(a, b) for a, b in per_epoch],
    )  # fmt: skip
    a, b = items.get("fp32"), items.get("mixed")
    if a is not None and b is not None and a.shape == b.shape and a.dim() == 1:
        fa, fb = a.float().cpu().tolist(), b.float().cpu().tolist()
        m.ci95, m.items = paired_mean_ci(fa, fb), len(fa)
    return m


class _Check:
    """One parity check in progress: the two configs, where records go, the result so far."""

    def __init__(
        self, result: ParityResult, configs: dict[str, Config], sink: Sink, control: Control | None
    ) -> None:
        self.result, self.configs, self.sink = result, configs, sink
        self.control = control or Control()
        self.val_correct: dict[str, torch.Tensor | None] = {}  # per run: the last eval's hits
        self.headers: dict[str, Mapping[str, Any] | None] = {}
        self.evals: dict[str, list[Mapping[str, Any]]] = {}
        self.control_mode = "off"  # on | off | auto (parity() sets it)

    def label(self, name: str) -> str:
        if name == "control":
            return "fp32 control (seed + 1)"
        return "fp32" if name == "fp32" else self.result.mixed

    def execute(self, run_dir: Path | None, early_steps: int) -> ParityResult:
        started = time.perf_counter()
        r = self.result
        self.emit(
            f"parity check: fp32 vs {r.mixed}, {r.epochs} epoch{'s' * (r.epochs > 1)}, "
            f"seed {r.seed}, on {r.device}",
            phase="start", mixed=r.mixed, epochs=r.epochs, early_steps=early_steps,
        )  # fmt: skip
        if early_steps:
            self.early_check(early_steps)
        total = 3 if self.control_mode == "on" else 2
        for i, name in enumerate(RUNS):
            if r.status != "completed":
                break
            self.emit(
                f"parity: training {self.label(name)} ({i + 1}/{total})", phase="run",
                training=name,
            )  # fmt: skip
            self.train(name)
        if r.status == "completed":
            r.metric = metric_parity(
                self.configs["fp32"], self.headers.get("fp32"), self.evals, self.val_correct
            )
            if r.metric is None:
                r.paired = pair_images(*(self.val_correct.get(name) for name in RUNS))
        if r.status == "completed" and (why := self.control_wanted()):
            self.emit(
                f"parity: training fp32 with seed + 1, the control ({why})", phase="run",
                training="control",
            )  # fmt: skip
            self.train("control")
            if r.status == "completed":
                r.control = control_result(r, self.configs["control"], self.evals, self.val_correct)
                if r.control is not None:
                    r.control["why"] = why
        r.elapsed_s = time.perf_counter() - started
        if r.metric is not None and r.status == "completed" and r.metric.gap is None:
            r.status, r.message = "failed", f"a run ended without a {r.metric.name}"
        elif r.metric is None and r.status == "completed" and r.gap_points is None:
            r.status, r.message = "failed", "a run ended without a validation accuracy"
        self.finish(run_dir)
        return r

    def control_wanted(self) -> str:
        """Why the control run is trained ('' when it is not): asked for, or (auto) a verdict
        that the seed's own noise could explain."""
        mode, r = self.control_mode, self.result
        if mode == "on":
            return "asked for"
        if mode != "auto" or "control" not in self.configs:
            return ""
        if r.verdict == "FAIL":  # could the seed alone move the metric that far?
            return "auto: the verdict is FAIL"
        return ""

    def early_check(self, steps: int) -> None:
        """Both precisions for `steps` steps, a loss every step; the schedule is the full
        run's, so these are the very losses the full runs start with."""
        for name in RUNS:
            probe = _ProbeControl(self.control)
            recorder = RunRecorder(self.sink, name, early=True, stop_after=steps, control=probe)
            cfg = self.configs[name]
            cfg = replace(cfg, train=replace(cfg.train, log_every=1, eval_every_epoch=False))
            outcome = run(cfg, recorder, probe)
            self.result.early_losses[name] = [loss for _, loss in recorder.losses]
            if not self.check_outcome(name, outcome, "in the early check"):
                return
        fp32, mixed = (self.result.early_losses[n] for n in RUNS)
        diff = max_rel_diff(fp32, mixed)
        self.result.early_max_rel_loss_diff = diff
        warn = diff is not None and diff > EARLY_WARN_REL_DIFF
        shown = "n/a" if diff is None else f"{100 * diff:.1f}%"
        self.emit(
            f"early check: largest relative train-loss difference over the first "
            f"{min(len(fp32), len(mixed))} steps: {shown}"
            + (f" (above {EARLY_WARN_REL_DIFF:.0%}: expect a FAIL)" if warn else ""),
            level="warning" if warn else "info", phase="early",
            early_max_rel_loss_diff=diff, early_losses=self.result.early_losses,
        )  # fmt: skip

    def train(self, name: str) -> None:
        recorder = RunRecorder(self.sink, name)
        outcome = run(self.configs[name], recorder, self.control)  # no run dir: nothing to keep
        r = self.result
        self.val_correct[name] = outcome.val_correct
        self.headers[name], self.evals[name] = recorder.header, recorder.evals
        r.train_loss[name] = recorder.losses
        if name == "control":
            self.check_outcome(name, outcome, "(the control)")
            return
        if name == "fp32":
            r.fp32_samples_per_s = outcome.samples_per_s
        else:
            r.mixed_samples_per_s = outcome.samples_per_s
        if recorder.header is not None and r.test_set_size is None:
            r.test_set_size = count_test_images(recorder.header)
        for i, rec in enumerate(recorder.evals):
            if len(r.per_epoch) <= i:
                r.per_epoch.append(EpochRow(epoch=i + 1))
            setattr(r.per_epoch[i], f"{name}_acc", rec.get(CLASSIFY_PRIMARY))
            setattr(r.per_epoch[i], f"{name}_val_loss", rec.get("val_loss"))
        self.check_outcome(name, outcome, "")

    def check_outcome(self, name: str, outcome: RunResult, where: str) -> bool:
        """False when the check cannot go on: cancelled, or the run failed (bad input raises)."""
        if self.control.stop_requested:
            self.result.status = "cancelled"
            self.result.message = self.control.stop_reason or "cancelled"
            return False
        if outcome.status == "failed":
            if isinstance(outcome.error, UserError):
                raise outcome.error
            self.result.status = "failed"
            where = f" {where}" if where else ""
            self.result.message = f"the {self.label(name)} run failed{where}: {outcome.reason}"
            return False
        return True

    def finish(self, run_dir: Path | None) -> None:
        r = self.result
        level = {"PASS": "info", "FAIL": "warning", None: "info"}.get(r.verdict, "error")
        phase = "cancelled" if r.verdict is None else "done"
        self.emit(
            r.summary(), level=level, phase=phase, verdict=r.verdict,
            gap_points=r.gap_points, speedup=r.speedup, result=r.to_json(),
        )  # fmt: skip
        if run_dir is not None:
            write_parity_json(r, RunDir(run_dir).parity_json)

    def emit(self, message: str, level: str = "info", **extra: Any) -> None:
        self.sink.write(event_record(message, level=level, kind="parity", **extra))
