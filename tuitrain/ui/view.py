"""What the panels say, computed from a Snapshot: pure functions, no Textual, no torch.

Widgets call these and only lay the results out, so the arithmetic (ETA, smoothing, the
scaler's last overflow, verdicts and hints) is testable without running an app.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuitrain.metrics.format import DASH, eta_seconds, format_value
from tuitrain.metrics.records import Record
from tuitrain.metrics.store import Series, Snapshot
from tuitrain.rundir.state import run_status, writer_exited

LOSS_SMOOTHING = 0.6  # EMA weight, as in TensorBoard's and W&B's smoothing slider

# Refresh rates of the dashboard and `watch --compare`. The UI's work holds the GIL that the
# engine thread needs between two torch ops, so on a CPU it costs training about 1.5x its own
# CPU share (BENCHMARKS.md item 4): 2 Hz / 1 Hz took the app's main thread from 0.049 to 0.036
# cores on the default preset. Keys do not wait for a tick: actions refresh the view at once.
TEXT_INTERVAL_S = 0.5  # text at 2 Hz
PLOT_INTERVAL_S = 1.0  # charts at 1 Hz


# ------------------------------------------------------------------------------ numbers
def format_rate(value: float | None) -> str:
    """A rate (samples, tokens or steps per second): thousands separators from 100, three
    significant digits below (``13.2``, ``0.0333``: a slow run's steps/s is not ``0.0``)."""
    if value is None or not math.isfinite(value):
        return DASH
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_seconds(value: float | None) -> str:
    """A step time: ``0.0612`` -> ``"61.2 ms"``, ``1.5`` -> ``"1.50 s"``, ``2e-5`` ->
    ``"20.0 µs"``; a dash where none was measured (None, not finite, zero or less: a
    script that logs twice in the same instant measured nothing, it did not take 0 ms)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return DASH
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1000:.1f} ms"
    if value >= 1e-6:
        return f"{value * 1e6:.1f} µs"
    return f"{format_value(value)} s"


def finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def mean(values: Sequence[float]) -> float | None:
    vals = finite(values)
    return sum(vals) / len(vals) if vals else None


def median(values: Sequence[float]) -> float | None:
    vals = sorted(finite(values))
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def smooth(values: Sequence[float], weight: float = LOSS_SMOOTHING) -> list[float]:
    """Debiased exponential moving average (TensorBoard's smoothing); NaN passes through."""
    out: list[float] = []
    acc = 0.0
    n = 0
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        acc = acc * weight + (1 - weight) * v
        n += 1
        out.append(acc / (1 - weight**n))
    return out


def smoothed_series(series: Series, weight: float = LOSS_SMOOTHING) -> Series:
    return Series(xs=series.xs, ys=tuple(smooth(series.ys, weight)))


# ------------------------------------------------------------------------------ run state
def as_number(value: object) -> float | None:
    """A number from a record or config field: ints and floats as they are, text that reads
    as a number (a hand-edited `grad_accum = "2"`) as that number, anything else None.
    Readers go through this instead of trusting a field's type: a file is data."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and len(value) < 64:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def config_section(snap: Snapshot, section: str) -> Mapping[str, Any]:
    """One table of the header's resolved config, or an empty mapping."""
    config = (snap.header or {}).get("config") or {}
    value = config.get(section) if isinstance(config, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def record_state(snap: Snapshot, quiet_s: float | None = None, exited: bool = False) -> str:
    """The run's state by the one state rule (`rundir.state.run_status`: the end record's
    status, crashed, silent, running) over what a snapshot knows: its header, end record
    and latest train record, how long its file has been still (`quiet_s`) and whether its
    writer exited (`exited`, `rundir.state.writer_exited`); "starting" before a header."""
    if snap.header is None and snap.end is None:
        return "starting"
    return run_status(snap.header, snap.end, snap.latest, quiet_s, exited)


def paused_by_records(snap: Snapshot) -> bool:
    """The run is paused as far as its records tell: its newest pause/resume event is a
    pause, and no end record came."""
    if snap.end is not None:
        return False
    for event in reversed(snap.events):
        kind = event.get("kind")
        if kind in ("pause", "resume"):
            return kind == "pause"
    return False


def display_state(
    snap: Snapshot,
    engine_state: str | None = None,
    *,
    pausing: bool = False,
    quiet_s: float | None = None,
    exited: bool = False,
) -> str:
    """The state the status bar shows: the engine's for a live run (compiling, evaluating,
    paused ...), else `record_state`'s, with the viewer's own on top: paused after a pause
    event, pausing while a pause is asked."""
    if engine_state not in (None, "idle"):
        state = str(engine_state)
    else:
        state = record_state(snap, quiet_s, exited)
        if state == "running" and paused_by_records(snap):
            state = "paused"
    if pausing and state not in ("paused", "completed", "stopped", "failed"):
        return "pausing"
    return state


def derived_state(snap: Snapshot) -> str:
    """The run state as far as the records tell, the file's stillness and its writer left
    aside (starting, paused, running, or the end record's status)."""
    return display_state(snap)


def writer_dead(snap: Snapshot, path: Path, quiet_s: float | None) -> bool:
    """Watch mode: the state rule says crashed for the run at `path` (its metrics file):
    no end record, and its writer exited (`rundir.state.writer_exited`)."""
    if snap.end is not None or snap.header is None:
        return False
    return record_state(snap, quiet_s, writer_exited(path.parent, quiet_s)) == "crashed"


def silence(snap: Snapshot, quiet_s: float | None) -> float | None:
    """Watch mode: how long a run without an `end` record has written nothing, when the
    state rule says silent (far longer than its own log interval: killed by -9, the OOM
    killer, a lost node), else None."""
    return quiet_s if record_state(snap, quiet_s) == "silent" else None


@dataclass(frozen=True, slots=True)
class Progress:
    step: int | None
    total_steps: int | None
    epoch: float | None
    epochs: int | None
    eta_s: float | None

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total_steps:
            return None
        return max(0.0, min(1.0, self.step / self.total_steps))


def progress(snap: Snapshot) -> Progress:
    """Step and epoch progress, and the ETA from the median of recent step times."""
    header = snap.header or {}
    latest = snap.latest or {}
    total = header.get("total_steps")
    step = latest.get("step")
    if step is None and snap.last_eval is not None:
        step = snap.last_eval.get("step")
    epochs = config_section(snap, "train").get("epochs")
    epoch = latest.get("epoch")
    if snap.end is not None:
        eta = 0.0 if snap.end.get("status") == "completed" else None
    else:
        eta = eta_seconds(total, step, snap.get("step_time_s").ys)
    return Progress(step, total, epoch, epochs, eta)


def progress_bar(fraction: float | None, width: int) -> str:
    """``█████░░░░░`` of `width` cells (eighths for the partial cell)."""
    if width <= 0:
        return ""
    if fraction is None:
        return "░" * width
    cells = fraction * width
    full = int(cells)
    partial = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < width else ""
    bar = "█" * full + (partial if partial.strip() else "")
    return bar + "░" * (width - len(bar))


# ------------------------------------------------------------------------------ failure
@dataclass(frozen=True, slots=True)
class Failure:
    message: str
    hint: str
    traceback: str | None


def failure(snap: Snapshot) -> Failure | None:
    """The run's failure (the error event the engine writes), or None."""
    for rec in reversed(snap.events):
        if rec.get("level") == "error" and rec.get("kind") == "failed":
            message = str(rec.get("message") or "")
            hint = str(rec.get("hint") or "")
            suffix = f" ({hint})"
            if hint and message.endswith(suffix):
                message = message[: -len(suffix)]
            return Failure(message, hint, rec.get("traceback"))
    if snap.end is not None and snap.end.get("status") == "failed":
        return Failure(str(snap.end.get("reason") or "the run failed"), "", None)
    return None


# ------------------------------------------------------------------------------ panels
def no_scaler_reason(precision: str | None) -> str | None:
    """Why a run has no GradScaler (None when it has one or the precision is unknown)."""
    if precision == "bf16":
        return (
            "no GradScaler with bf16:\nbf16 keeps fp32's exponent range, so small "
            "gradients do not underflow and need no loss scaling"
        )
    if precision == "fp32":
        return "no GradScaler with fp32:\nfull precision needs no loss scaling"
    return None


def last_overflow_step(skipped: Series) -> int | None:
    """The last log point where the skipped-step count rose (an inf/NaN gradient)."""
    prev = 0.0
    last: int | None = None
    for x, y in zip(skipped.xs, skipped.ys, strict=True):
        if y > prev:
            last = int(x)
        prev = y
    return last


def host_memory_bytes() -> int | None:
    """Physical memory of this machine (for the CPU memory panel), or None."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def human_count(n: float | None) -> str:
    """``824458`` -> ``"824k"``, ``11.2e6`` -> ``"11.2M"``."""
    if n is None:
        return DASH
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            value = n / div
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{n:.0f}"


def pick_unit(max_bytes: float) -> tuple[float, str]:
    """A divisor and unit so byte values plot as readable numbers."""
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if max_bytes >= div:
            return float(div), unit
    return 1.0, "B"


class ThreadCpuShare:
    """The CPU time of the thread that calls `sample()` (the UI's event loop: polling,
    layout, rendering) per wall second, over windows of `window_s`; None until one closes."""

    def __init__(self, window_s: float = 2.0) -> None:
        self.window_s = window_s
        self._start: tuple[float, float] | None = None
        self._share: float | None = None

    def sample(self) -> None:
        now = (time.monotonic(), time.thread_time())
        if self._start is None:
            self._start = now
            return
        wall = now[0] - self._start[0]
        if wall >= self.window_s:
            self._share = max(now[1] - self._start[1], 0.0) / wall
            self._start = now

    def share(self) -> float | None:
        return self._share


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything a panel may show at one tick: the snapshot plus live facts of the host."""

    snap: Snapshot
    engine_state: str | None = None  # Control.state of the live run; None in watch mode
    pausing: bool = False  # pause requested, engine not yet at a step boundary
    live: bool = False  # a run is hosted by this process (not watching records)
    host_memory: int | None = None  # physical memory of this machine, live CPU runs only
    elapsed_s: float | None = None  # wall time since the live run started
    quiet_s: float | None = None  # watch mode: how long the run's file has been still
    exited: bool = False  # watch mode: its writer exited (rundir.state.writer_exited)
    ui_cpu_frac: float | None = None  # live: the UI thread's CPU time per wall second
    live_step: int | None = None  # live: the last step the engine finished (Control.step)
    live_step_s: float | None = None  # live: seconds a step, from how live_step advances

    @property
    def state(self) -> str:
        """What the status bar shows (display_state over what the frame knows)."""
        return display_state(
            self.snap,
            self.engine_state,
            pausing=self.pausing,
            quiet_s=self.quiet_s,
            exited=self.exited,
        )

    @property
    def dead(self) -> bool:
        """The state rule says crashed: no end record, and its writer exited."""
        return record_state(self.snap, self.quiet_s, self.exited) == "crashed"

    @property
    def silent_s(self) -> float | None:
        """How long a run the state rule calls silent has written nothing, else None."""
        silent = record_state(self.snap, self.quiet_s, self.exited) == "silent"
        return self.quiet_s if silent else None


class StepClock:
    """Seconds a step from the engine's step counter as the UI sees it advance: a sign of
    life before the first log point (a slow first interval is not a hang)."""

    def __init__(self) -> None:
        self._first: tuple[float, int] | None = None

    def seconds_per_step(self, step: int, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        if self._first is None or step < self._first[1]:  # the first look, or a new run
            self._first = (now, step)
            return None
        t0, s0 = self._first
        return (now - t0) / (step - s0) if step > s0 else None


def latest_alert(snap: Snapshot) -> Record | None:
    """The newest alert event of the run (kind "alert"), if any."""
    for event in reversed(snap.events):
        if event.get("kind") == "alert":
            return event
    return None


def progress_after_latest(snap: Snapshot) -> tuple[int | None, float | None]:
    """A watched run's sign of life between log points: the newest `progress` event (the
    engine writes one after ten quiet seconds) past the latest train record's step, as
    (steps done, seconds a step); (None, None) when there is none."""
    latest_step = (snap.latest or {}).get("step")
    for event in reversed(snap.events):
        if event.get("kind") != "progress":
            continue
        step, per_step = event.get("step"), event.get("step_time_s")
        if not isinstance(step, int) or isinstance(step, bool):
            return None, None
        if isinstance(latest_step, int) and step <= latest_step:
            return None, None
        ok = isinstance(per_step, (int, float)) and math.isfinite(per_step) and per_step > 0
        return step, float(per_step) if ok else None
    return None, None
