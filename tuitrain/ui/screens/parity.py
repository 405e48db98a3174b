"""Parity screen: the fp32-vs-mixed precision check, run from the dashboard (`c`).

The check (`tuitrain.engine.parity.parity`) trains the preset twice, fp32 then mixed, in a
thread of its own ("tuitrain-parity", not a daemon: it is always stopped and ended before
the app is). A hosted training run in progress is paused first, so the two do not share the
device, and resumed when the screen closes (only when this screen paused it). The screen polls
the check's `ParityStores` on a timer: progress of both runs, overlaid train-loss curves, the
per-epoch table and, at the end, a verdict banner with the gap, its resolution, its noise
(95% interval, discordant images, McNemar p; a sentence when the verdict and the noise
disagree) and the speedup. Escape cancels a check in progress (the thread stops at a step
boundary; the screen closes once it has ended) or closes a finished one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tuitrain.core.config import Config
from tuitrain.core.control import Control
from tuitrain.metrics.parity_report import (
    EARLY_STEPS,
    THRESHOLD_POINTS,
    ParityResult,
    ParityStores,
    format_p,
)
from tuitrain.metrics.records import CLASSIFY_PRIMARY
from tuitrain.metrics.store import Snapshot
from tuitrain.rundir.layout import PARITY_JSON, RunDir
from tuitrain.ui.widgets.chart import Line, MetricChart

if TYPE_CHECKING:
    from tuitrain.host.run import RunHost

TICK_S = 0.25  # text at 4 Hz; the chart every other tick (2 Hz), only when data changed
PAUSE_WAIT_S = 5.0  # how long to wait for the training run to reach a step boundary
THREAD_NAME = "tuitrain-parity"
NO_PRESET = "the parity check needs a preset: start tuitrain with one (this app only watches)"


class ParityScreen(ModalScreen[None]):
    """Runs the parity check in a thread and shows it; escape cancels or closes."""

    BINDINGS = [
        Binding("escape,q", "close", "Cancel / close"),
        # A modal screen hides the app's bindings: these two say why they do nothing here.
        Binding("p", "app.pick_preset", show=False),
        Binding("space", "app.toggle_pause", show=False),
    ]

    def __init__(
        self,
        cfg: Config | None,
        epochs: int = 1,
        mixed: str | None = None,
        early_steps: int = EARLY_STEPS,
        *,
        host: RunHost | None = None,
        run_dir: Path | None = None,
        with_control: bool = False,
    ) -> None:
        super().__init__()
        # a third run, fp32 with seed + 1: always (C), or only when the verdict needs it (c)
        self.with_control = with_control
        self.cfg, self.epochs, self.mixed, self.early_steps = cfg, epochs, mixed, early_steps
        self.host, self.run_dir = host, run_dir
        self.stores = ParityStores()
        self.control = Control()
        self.thread: threading.Thread | None = None
        self.result: ParityResult | None = None
        self.error: str | None = None
        self.cancelling = False
        self.paused_training = False  # this screen paused the hosted run: resume on close
        self.training_note = ""
        self._opened = time.monotonic()
        self._ticks = 0
        self._chart_versions: tuple[int, int] = (-1, -1)

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Vertical(id="parity-dialog", classes="dialog") as dialog:
            dialog.border_title = "Parity check · fp32 vs mixed precision"
            dialog.border_subtitle = "escape cancels / closes"
            # markup=False: these show preset names, paths and error messages literally
            yield Static(self.intro(), classes="dialog-note", id="parity-note", markup=False)
            yield Static("", id="parity-training", markup=False)
            yield Static("", id="parity-progress", markup=False)
            yield MetricChart(id="parity-chart")
            yield Static("", id="parity-table", markup=False)
            yield Static("", id="parity-verdict", markup=False)

    def intro(self) -> str:
        if self.cfg is None:
            return NO_PRESET
        runs = f"{self.epochs} epoch{'s' * (self.epochs > 1)}"
        control = (
            " Then a control: fp32 again with seed + 1, to see how far the seed alone moves"
            " the metric."
            if self.with_control
            else " A control run (fp32, seed + 1) follows a FAIL; Shift+C always adds it."
        )
        return (
            f"Preset {self.cfg.name} trained twice, fp32 then mixed, same weights, batches and "
            f"seed; {runs} each (a full check: tuitrain parity --epochs 3). PASS when the "
            f"validation accuracies differ by at most {THRESHOLD_POINTS} point.{control}"
        )

    def on_mount(self) -> None:
        if self.cfg is None:
            self.query_one("#parity-verdict", Static).update("nothing to check")
            return
        host = self.host
        if host is not None and host.alive and not host.control.paused:
            host.control.pause()
            self.paused_training = True
        elif host is not None and host.alive:
            self.training_note = "Training is paused (by you) and stays paused."
        self.set_interval(TICK_S, self.tick)
        self.call_after_refresh(self.tick)

    # -- the check thread ------------------------------------------------------------------
    def training_ready(self) -> bool:
        """True once the hosted run no longer uses the device (paused, ended, or none)."""
        host = self.host
        if host is None or not host.alive or host.control.state == "paused":
            return True
        return time.monotonic() - self._opened > PAUSE_WAIT_S

    def start_check(self) -> None:
        if self.paused_training and self.host is not None:
            self.training_note = (
                f"Training paused at step {self.host.control.step} while the check uses the "
                "device; it resumes when you close this screen."
            )
        self.thread = threading.Thread(target=self._check, name=THREAD_NAME, daemon=False)
        self.thread.start()

    def _check(self) -> None:
        from tuitrain.engine.parity import parity  # imports torch: in the check's thread

        assert self.cfg is not None
        run_dir = self.run_dir
        try:
            if run_dir is not None:
                run_dir.mkdir(parents=True, exist_ok=True)
            self.result = parity(
                self.cfg, self.epochs, self.mixed, sink=self.stores.sink(),
                control=self.control, run_dir=run_dir, early_steps=self.early_steps,
                with_control="on" if self.with_control else "auto",
            )  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - shown on screen, never lost
            self.error = str(exc) or type(exc).__name__
            return
        host = self.host
        if host is not None and host.run_dir is not None and self.result is not None:
            from tuitrain.metrics.parity_report import record_verdict

            # the verdict becomes an event of the run the check was started from
            record_verdict(RunDir(host.run_dir).metrics, self.result, run_dir, host.store)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    # -- polling ---------------------------------------------------------------------------
    def tick(self) -> None:
        if self.thread is None and not self.cancelling and self.training_ready():
            self.start_check()
        if self.cancelling and not self.running:
            self.finish()
            return
        fp32, mixed = self.stores.fp32.snapshot(), self.stores.mixed.snapshot()
        label = self.mixed_label(fp32)
        self.query_one("#parity-training", Static).update(self.training_text())
        self.query_one("#parity-progress", Static).update(self.progress_text(fp32, mixed, label))
        self.query_one("#parity-table", Static).update(self.table_text(fp32, mixed, label))
        self.update_verdict(fp32)
        self._ticks += 1
        if self._ticks % 2 == 1 and (fp32.version, mixed.version) != self._chart_versions:
            self._chart_versions = (fp32.version, mixed.version)
            self.draw_chart(fp32, mixed, label)

    def mixed_label(self, snap: Snapshot) -> str:
        for rec in snap.events:
            if rec.get("kind") == "parity" and rec.get("mixed"):
                return str(rec["mixed"])
        return self.mixed or "mixed"

    def training_text(self) -> str:
        if self.paused_training and self.thread is None:
            return "Pausing the training run at its next step boundary…"
        return self.training_note

    def progress_text(self, fp32: Snapshot, mixed: Snapshot, label: str) -> str:
        phase = next(
            (e for e in reversed(fp32.events) if e.get("kind") == "parity"), None
        )  # parity events reach both stores
        if self.cancelling:
            head = "cancelling… (the run stops at its next step boundary)"
        elif self.thread is None:
            head = "waiting for the training run to pause…"
        elif phase is None:
            head = "starting…"
        elif phase.get("phase") in ("done", "cancelled"):
            took = f" in {self.result.elapsed_s:.0f} s" if self.result is not None else ""
            head = f"check {'finished' if phase['phase'] == 'done' else 'cancelled'}{took}"
        else:
            head = str(phase.get("message", ""))
        lines = [head]
        for name, snap in (("fp32", fp32), (label, mixed)):
            lines.append(f"  {name:<5} {run_progress(snap)}")
        return "\n".join(lines)

    def table_text(self, fp32: Snapshot, mixed: Snapshot, label: str) -> str:
        rows = [f"{'epoch':>5}  {'fp32 acc':>9}  {label + ' acc':>9}  {'gap (pt)':>8}"]
        f_evals, m_evals = list(fp32.evals), list(mixed.evals)
        for i in range(max(len(f_evals), len(m_evals), self.epochs)):
            fa = _acc(f_evals, i)
            ma = _acc(m_evals, i)
            gap = "—" if fa is None or ma is None else f"{100 * (fa - ma):+.2f}"
            rows.append(f"{i + 1:>5}  {_pct(fa):>9}  {_pct(ma):>9}  {gap:>8}")
        return "\n".join(rows)

    def update_verdict(self, snap: Snapshot) -> None:
        widget = self.query_one("#parity-verdict", Static)
        text, kind = self.verdict_text()
        widget.update(text)
        for cls in ("-pass", "-fail", "-error", "-pending"):
            widget.set_class(cls == f"-{kind}", cls)

    def verdict_text(self) -> tuple[str, str]:
        if self.error is not None:
            return f"ERROR: {self.error}", "error"
        r = self.result
        if r is None:
            return "verdict: pending…", "pending"
        if r.verdict is None:
            return f"cancelled: {r.message}", "error"
        if r.verdict == "ERROR":
            return f"ERROR: {r.message}", "error"
        where = f"\n{PARITY_JSON} in {self.run_dir}" if self.run_dir is not None else ""
        control = f"\n{line}" if (line := r.control_line()) else ""
        if r.metric is not None:  # a task other than classify: its primary metric
            return r.summary().removeprefix("parity ") + control + where, r.verdict.lower()
        sign = "<=" if r.verdict == "PASS" else ">"
        gap = r.gap_points or 0.0
        images = (
            f"test set {r.test_set_size:,} images: one image = {r.one_image_points:.2f} point"
            if r.test_set_size and r.one_image_points
            else "test set size unknown"
        )
        speed = f"{r.mixed}/fp32 = {r.speedup:.2f}×" if r.speedup else "n/a"
        noise = noise_text(r)
        return (
            f"{r.verdict}: gap {gap:+.2f} point (|gap| {sign} {r.threshold_points}) · {images}"
            f" · speedup {speed}{noise}{control}{where}",
            r.verdict.lower(),
        )

    def draw_chart(self, fp32: Snapshot, mixed: Snapshot, label: str) -> None:
        chart = self.query_one("#parity-chart", MetricChart)
        buckets = chart.plot_columns()
        f_loss, m_loss = fp32.get("loss"), mixed.get("loss")
        what = "train loss"
        lines = [
            Line(*f_loss.decimate(buckets), color="primary"),
            Line(*m_loss.decimate(buckets), color="warning"),
        ]
        early = early_losses(fp32)
        if len(f_loss) < 3 and len(m_loss) < 3 and early:  # short runs: the per-step losses
            what = "train loss per step (early check)"
            lines = [
                Line(list(range(1, len(ys) + 1)), ys, color=color)
                for ys, color in (
                    (early.get("fp32", []), "primary"),
                    (early.get("mixed", []), "warning"),
                )
            ]
        chart.draw(lines, yfmt=lambda v: f"{v:.3g}")
        chart.border_title = f"{what} · [$primary]fp32[/] vs [$warning]{label}[/]"

    # -- closing ---------------------------------------------------------------------------
    def action_close(self) -> None:
        if self.running:
            self.cancelling = True
            self.control.request_stop("parity cancelled")
            self.tick()
            return
        self.finish()

    def finish(self) -> None:
        self.resume_training()
        if self.is_attached and self.app.screen is self:
            self.dismiss(None)

    def resume_training(self) -> None:
        if self.paused_training and self.host is not None:
            self.paused_training = False
            self.host.control.resume()

    def on_unmount(self) -> None:
        """However the screen goes (the app quits), the check stops and the run resumes."""
        self.control.request_stop("parity cancelled")
        self.resume_training()


def noise_text(r: ParityResult) -> str:
    """The verdict's noise on lines of its own (empty without a pairing): the gap's 95%
    interval, the discordant images, McNemar's p, and the sentence when they disagree."""
    ci, p, d = r.gap_ci95_points, r.p_value, r.discordant
    if ci is None or p is None or d is None:
        return ""
    text = (
        f"\ngap 95% CI [{ci[0]:+.2f}, {ci[1]:+.2f}] point · discordant images: "
        f"{d['fp32_only']:,} only fp32 right, {d['mixed_only']:,} only {r.mixed} right · "
        f"McNemar p = {format_p(p)}"
    )
    return text + (f"\n{r.noise_note}" if r.noise_note else "")


def run_progress(snap: Snapshot) -> str:
    """`step 12/20 · training`, `waiting` or `done` for one run's store."""
    if snap.header is None:
        return "waiting"
    step = (snap.latest or {}).get("step", 0)
    total = snap.header.get("total_steps") or "?"
    state = "done" if snap.end is not None else "training"
    if snap.end is not None and snap.end.get("status") not in (None, "completed"):
        state = str(snap.end.get("status"))
    return f"step {step}/{total} · {state}"


def early_losses(snap: Snapshot) -> Mapping[str, list[float]]:
    """The early check's per-step losses by run ("fp32", "mixed"), once it has reported."""
    for rec in snap.events:
        if rec.get("kind") == "parity" and rec.get("phase") == "early":
            return rec.get("early_losses") or {}
    return {}


def _acc(evals: list[Mapping[str, Any]], i: int) -> float | None:
    value = evals[i].get(CLASSIFY_PRIMARY) if i < len(evals) else None
    return float(value) if value is not None else None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}%"
