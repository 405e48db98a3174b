"""Runs overlaid: `tuitrain watch --compare A B [C ...]` (2 to 8 runs: fp32 against bf16, say).

Each run has its own `MetricStore`, fed by its own `JsonlFollower` (built by
`tuitrain.commands.watch`), so a live run keeps updating; a resumed run is every segment in
its file, from its first step. The app shows one row per run (label, status, latest step,
smoothed loss, median samples/s, median achieved TFLOP/s and MFU, the judged metric's last
value: each row is the run's `rundir.summary.RunSummary` and what only compare shows, its
state `rundir.state`'s rule), each run against A (median throughput ratio, the judged
metric's gap in its units), and three charts with every run overlaid: smoothed train loss,
samples/s per step, and the judged metric per evaluation. Text is polled at 2 Hz and the
charts at 1 Hz, each redrawn only when something it shows changed, from series decimated to
the chart's width (the dashboard's way, `tuitrain.ui.widgets.panel.Panel`). Keys: `l`
log-scale y on the loss chart (and back), `?` help, `q` quit; the command palette lists them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container
from textual.screen import Screen
from textual.widgets import Footer, Static

from tuitrain.metrics.format import DASH
from tuitrain.metrics.records import CLASSIFY_DECLARATION, format_metric
from tuitrain.metrics.store import MetricStore, Series, Snapshot
from tuitrain.rundir.layout import METRICS_NAME
from tuitrain.rundir.state import quiet_seconds, run_status, writer_exited
from tuitrain.rundir.summary import (
    VAL_LOSS,
    RunSummary,
    eval_names,
    judged_metric,
    segment_seconds,
    summary_of,
)
from tuitrain.ui.screens.help import HelpScreen, binding_commands
from tuitrain.ui.stopping import StoppingApp
from tuitrain.ui.view import (
    LOSS_SMOOTHING,
    PLOT_INTERVAL_S,
    TEXT_INTERVAL_S,
    format_rate,
    median,
    paused_by_records,
    smoothed_series,
)
from tuitrain.ui.viewing import ViewingBadge
from tuitrain.ui.widgets.chart import Line, MetricChart, format_tick, log_title
from tuitrain.ui.widgets.panel import esc as escape
from tuitrain.ui.widgets.panel import same_objects
from tuitrain.ui.widgets.status import STATE_STYLE

# runs A..H (theme variables); A and B as on the parity screen
COLORS = ("primary", "warning", "success", "error", "accent", "secondary", "foreground",
          "text-muted")  # fmt: skip
NAMES = "ABCDEFGH"
MAX_RUNS = len(NAMES)
COLUMNS = """\
run: preset (from the run's header) · run dir · status: running, completed, failed, stopped \
(the end record), waiting (no file yet), crashed (no end record and no process holds the \
run dir lock), silent (no end record, no line for 10 log \
intervals) · step: latest logged step · loss: train loss smoothed \
as on the dashboard (EMA {w}) · samples/s: median of the points held · TFLOP/s: median \
achieved (the run's FLOPs per sample x samples/s) · MFU: median TFLOP/s over the device's peak \
(— without a known peak: CPUs unless --measure-peak) · val acc: latest evaluation \
· B/A (C/A ...): each run's median samples/s over A's · gap: its primary metric minus \
A's (points for accuracy)"""


@dataclass(frozen=True, slots=True)
class Source:
    """One run to compare: its name (A, B), its metrics file and the store it feeds."""

    name: str
    path: Path
    store: MetricStore
    color: str


DEFAULT_METRIC_LABEL = CLASSIFY_DECLARATION["primary"].replace("_", " ")  # classify's label


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One run's row: its summary (`rundir.summary.RunSummary`, the one every command uses,
    made here from the store's snapshot: every segment its follower read; its state by
    `rundir.state.run_status`) and what only compare shows: the smoothed loss, the median
    achieved TFLOP/s and MFU, and the judged metric's latest evaluation."""

    label: str
    run: RunSummary
    loss: float | None = None
    median_tflops: float | None = None
    median_mfu: float | None = None
    metric: float | None = None  # the judged metric's latest value

    @property
    def state(self) -> str:
        return self.run.status

    @property
    def metric_key(self) -> str:
        """The metric the run is judged by (its loss before any evaluation of a task that
        declares none)."""
        return self.run.best_metric or VAL_LOSS

    @property
    def metric_label(self) -> str:
        """Its column label: classification's primary reads "val acc" (as before), another
        metric its name."""
        key = self.metric_key
        return DEFAULT_METRIC_LABEL if key == CLASSIFY_DECLARATION["primary"] else key[:12]


def run_label(snap: Snapshot, path: Path) -> str:
    """`preset · run dir`: the header's preset and the dir name (the file name if it is not
    a run dir's metrics file)."""
    where = path.parent.name if path.name == METRICS_NAME else path.name
    preset = (snap.header or {}).get("preset")
    return f"{preset} · {where}" if preset else where


def run_state(snap: Snapshot, path: Path) -> str:
    """waiting (no file yet), starting (no header yet), else the one state rule's
    (`run_status`: its writer has exited when the file has been still for a second and no
    process holds the run dir's lock), paused where a running run's last event says so."""
    if snap.header is None:
        return "starting" if path.exists() else "waiting"
    quiet = quiet_seconds(path)
    exited = snap.end is None and writer_exited(path.parent, quiet)
    state = run_status(snap.header, snap.end, snap.latest, quiet, exited)
    return "paused" if state == "running" and paused_by_records(snap) else state


def summarize(snap: Snapshot, path: Path) -> CompareRow:
    """The row of the run in `path` from one snapshot of its store."""
    quiet = quiet_seconds(path)
    steps = [(r or {}).get("step") for r in (snap.latest, snap.last_eval, snap.end)]
    run = summary_of(
        path.parent,
        snap.header,
        status=run_state(snap, path),
        end=snap.end,
        evals=snap.evals,
        steps=steps,
        segment_s=segment_seconds(
            snap.header, snap.end, None if quiet is None else time.time() - quiet
        ),
        samples_per_s=median(snap.get("samples_per_s").ys),
        tokens_per_s=median(snap.get("tokens_per_s").ys),
        step_time_s=median(snap.get("step_time_s").ys),
    )  # fmt: skip
    key = run.best_metric
    value = (snap.last_eval or {}).get(key) if key else None
    if value is None and key and snap.end is not None:
        value = snap.end.get(key)
    loss = snap.get("loss")
    return CompareRow(
        label=run_label(snap, path),
        run=run,
        loss=smoothed_series(loss).last if len(loss) else None,
        median_tflops=median(snap.get("tflops").ys),
        median_mfu=median(snap.get("mfu").ys),
        metric=float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None,
    )


def throughput_ratio(a: CompareRow, b: CompareRow) -> float | None:
    """B's median samples/s over A's, or None when either is unknown."""
    rate_a, rate_b = a.run.samples_per_s, b.run.samples_per_s
    if rate_a is None or rate_b is None or rate_a <= 0:
        return None
    return rate_b / rate_a


def metric_gap(a: CompareRow, b: CompareRow) -> float | None:
    """B's primary metric minus A's (in points for a metric declared pct), or None when
    either is unknown or the runs' primary metrics differ."""
    if a.metric_key != b.metric_key or a.metric is None or b.metric is None:
        return None
    return (b.metric - a.metric) * (100 if a.run.best_format == "pct" else 1)


def comparison_text(a: CompareRow, b: CompareRow, names: tuple[str, str] = ("A", "B")) -> str:
    """`B/A samples/s ×1.32 · TFLOP/s ×1.32 · val acc B−A −0.10 pt` (content markup); the
    TFLOP/s ratio differs from the samples/s one when the runs' models differ."""
    first, other = names
    ratio = throughput_ratio(a, b)
    flops_ratio = None
    if a.median_tflops and b.median_tflops is not None:
        flops_ratio = b.median_tflops / a.median_tflops
    same = a.metric_key == b.metric_key
    pct = a.run.best_format == "pct"
    gap = metric_gap(a, b)
    ratio_text = DASH if ratio is None else f"×{ratio:.2f}"
    if gap is None:
        why = "after an evaluation of each" if same else "the runs' primary metrics differ"
        gap_text = f"{DASH} [$foreground-muted]({why})[/]"
    else:
        final = a.state != "running" and b.state != "running"
        note = "" if final else " [$foreground-muted](not final)[/]"
        gap_text = f"{gap:+.2f} pt{note}" if pct else f"{gap:+.4g}{note}"
    flops_text = (
        ""
        if flops_ratio is None
        else f"[$foreground-muted]TFLOP/s[/] {other}/{first} [b]×{flops_ratio:.2f}[/b]   "
    )
    return (
        f"[$foreground-muted]median samples/s[/] {other}/{first} [b]{ratio_text}[/b]   "
        f"{flops_text}[$foreground-muted]{escape(a.metric_label)}[/] {other}−{first} "
        f"[b]{gap_text}[/b]"
    )


def comparisons_text(sources: Sequence[Source], summaries: Sequence[CompareRow]) -> str:
    """Each run against the first, one line each (two runs: the one line B against A)."""
    first = summaries[0]
    return "\n".join(
        f"[b ${source.color}]■[/] " * (len(summaries) > 2)
        + comparison_text(first, s, (sources[0].name, source.name))
        for source, s in zip(sources[1:], summaries[1:], strict=True)
    )


def _num(value: float | None, fmt: str) -> str:
    return DASH if value is None or not math.isfinite(value) else format(value, fmt)


def tflops_cell(value: float | None) -> str:
    """Achieved TFLOP/s in at most 7 characters: ``0.0104``, ``41.3``, ``1.2e-05``."""
    if value is None or not math.isfinite(value):
        return DASH
    return f"{value:.3g}" if value >= 0.001 else f"{value:.1e}"


def table_text(rows: Sequence[tuple[Source, CompareRow]], width: int) -> str:
    """The runs table as content markup, fitted to `width` columns (labels get the rest).
    The TFLOP/s and MFU columns go first when the labels (preset · run dir, what tells the
    runs apart) would not fit whole with them."""
    fixed = 4 + 1 + 9 + 1 + 10 + 1 + 7 + 1 + 9 + 1 + 7  # marker .. val acc, without perf
    perf_w = 1 + 7 + 1 + 5  # TFLOP/s, MFU
    longest = max((len(s.label) for _, s in rows), default=8)
    perf = width - fixed - perf_w - 1 >= min(longest, 44)
    label_w = max(8, min(44, width - fixed - (perf_w if perf else 0) - 1))
    perf_head = f" {'TFLOP/s':>7} {'MFU':>5}" if perf else ""
    metric_label = rows[0][1].metric_label if rows else DEFAULT_METRIC_LABEL
    head = (
        f"    {'run':<{label_w}} {'status':<9} {'step':>10} {'loss':>7} "
        f"{'samples/s':>9}{perf_head} {metric_label:>7}"
    )
    lines = [f"[$foreground-muted]{escape(head)}[/]"]
    for source, s in rows:
        label = s.label if len(s.label) <= label_w else s.label[: label_w - 1] + "…"
        style = STATE_STYLE.get(s.state, "$foreground")
        step = DASH if s.run.steps is None else f"{s.run.steps:,}"
        acc = DASH if s.metric is None else format_metric(s.metric, s.run.best_format)
        mfu = DASH if s.median_mfu is None else f"{100 * s.median_mfu:.1f}%"
        perf_cells = f" {tflops_cell(s.median_tflops):>7} {mfu:>5}" if perf else ""
        lines.append(
            f"[b ${source.color}]■ {escape(source.name)}[/] {escape(f'{label:<{label_w}}')} "
            f"[{style}]{escape(f'{s.state:<9}')}[/] {step:>10} {_num(s.loss, '.4f'):>7} "
            f"{format_rate(s.run.samples_per_s):>9}{perf_cells} {acc:>7}"
        )
    return "\n".join(lines)


class OverlayChart(MetricChart):
    """One metric of both runs on shared axes; redrawn only when a series, the size or the
    theme changed (the store hands out the same Series object until that series changes)."""

    def __init__(self, metric: str, title: str, *, smooth: bool, id: str) -> None:
        super().__init__(id=id, classes="overlay")
        self.metric, self.title, self.smooth = metric, title, smooth
        self._key: tuple[object, ...] | None = None
        self._data: tuple[object, ...] = ()
        self.legend = ""  # `A vs B` in the runs' colours, from the first draw

    def series(self, snap: Snapshot) -> Series:
        series = snap.get(self.metric)
        return smoothed_series(series) if self.smooth and len(series) else series

    def refresh_plot(self, sources: Sequence[Source], snaps: Sequence[Snapshot]) -> None:
        if not self.display or not self.size.area:
            return
        data = tuple(x for snap in snaps for x in (snap.header, snap.series.get(self.metric)))
        key = (self.size, self.app.theme, self.log_y)
        if key == self._key and same_objects(data, self._data):
            return
        self._key, self._data = key, data
        buckets = self.plot_columns()
        lines = [
            Line(*self.series(snap).decimate(buckets), color=source.color)
            for source, snap in zip(sources, snaps, strict=True)
        ]
        self.draw(lines, yfmt=format_tick)
        self.legend = " vs ".join(f"[${s.color}]{escape(s.name)}[/]" for s in sources)
        self.border_title = self.full_title()

    def full_title(self) -> str:
        """`train loss, smoothed (EMA 0.98) · A vs B`, plus `· log y` in that mode."""
        legend = f" · {self.legend}" if self.legend else ""
        return log_title(f"{self.title}{legend}", self.log_y)

    def toggle_log_y(self) -> bool:
        """Log y on or off (the title says so at once); redrawn at the next poll."""
        self.log_y = not self.log_y
        self.border_title = self.full_title()
        return self.log_y


class CompareApp(StoppingApp):
    """Runs A and B: a table, B against A, and overlaid loss and throughput charts. Stops on
    a signal, or when its terminal or textual serve's connection goes away (`StoppingApp`)."""

    CSS_PATH = "compare.tcss"
    TITLE = "tuitrain watch --compare"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("l", "toggle_log_y", "Log y", tooltip="Loss chart: log-scale y axis, or linear"),
        Binding("question_mark", "help", "Help", tooltip="These keys and what the columns mean"),
        Binding("h,f1", "help", "Help", show=False, tooltip="These keys and what the columns mean"),
        Binding("escape", "back_to_runs", "Back", tooltip="Back to the runs table"),
        Binding("q", "quit", "Quit", tooltip="Close the viewer (the runs are not touched)"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True, tooltip="Close the viewer"),
    ]

    def __init__(self, sources: Sequence[Source]) -> None:
        super().__init__()
        if not 2 <= len(sources) <= MAX_RUNS:
            raise ValueError(f"compare takes 2 to {MAX_RUNS} runs, got {len(sources)}")
        self.sources = list(sources)
        self.table = Static("", id="runs")
        self.comparison = Static("", id="comparison")
        self.charts = [
            OverlayChart("loss", f"train loss, smoothed (EMA {LOSS_SMOOTHING})", smooth=True,
                         id="loss-chart"),
            OverlayChart("samples_per_s", "samples/s", smooth=False, id="rate-chart"),
        ]  # fmt: skip
        key = self.primary_key()  # the primary metric per evaluation, every run's
        self.charts.append(OverlayChart(key, f"{key}, per evaluation", smooth=False,
                                        id="metric-chart"))  # fmt: skip
        self._text: tuple[str, str] | None = None
        self.back_to: str | None = None  # opened from `tuitrain runs`: escape goes back

    def compose(self) -> ComposeResult:
        yield self.table
        yield self.comparison
        with Container(id="charts"):
            yield from self.charts
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(TEXT_INTERVAL_S, self.poll_text)
        self.set_interval(PLOT_INTERVAL_S, self.poll_plots)
        self.badge = ViewingBadge("VIEWING", id="viewing")  # it reads runs, steers none
        self.screen.mount(self.badge)
        self.call_after_refresh(self.poll_all)

    def on_resize(self, event: events.Resize) -> None:
        if hasattr(self, "badge"):  # in the footer's row, left of the palette's hint
            self.badge.place(event.size.width, event.size.height - 1, margin=12)
        self.call_after_refresh(self.poll_all)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action != "back_to_runs" or self.back_to is not None

    def offered(self) -> list[Binding]:
        """The bindings that act (help and the palette list them)."""
        return [b for b in Binding.make_bindings(self.BINDINGS) if self.check_action(b.action, ())]

    def action_back_to_runs(self) -> None:
        if self.back_to is not None:
            self.exit(0)

    def primary_key(self) -> str:
        """The metric the first run is judged by (rundir.summary.judged_metric): its header's
        primary, a script's first evaluation metric other than its loss; no header yet:
        classification's; no evaluation yet: the loss."""
        snap = self.sources[0].store.snapshot()
        judged = judged_metric(snap.header, eval_names(snap.evals))
        return judged.name if judged is not None else VAL_LOSS

    def snapshots(self) -> list[Snapshot]:
        return [source.store.snapshot() for source in self.sources]

    def summaries(self) -> list[CompareRow]:
        return [
            summarize(snap, s.path) for snap, s in zip(self.snapshots(), self.sources, strict=True)
        ]

    def poll_all(self) -> None:
        self.poll_text()
        self.poll_plots()

    def poll_text(self) -> None:
        if not self.table.is_attached:
            return  # a tick that lands while the app closes: its screen is already gone
        summaries = self.summaries()
        width = self.table.content_region.width or self.size.width
        text = (table_text(list(zip(self.sources, summaries, strict=True)), width),
                comparisons_text(self.sources, summaries))  # fmt: skip
        if text != self._text:
            self._text = text
            self.table.update(text[0])
            self.comparison.update(text[1])

    def poll_plots(self) -> None:
        if not self.table.is_attached:
            return
        snaps = self.snapshots()
        for chart in self.charts:
            chart.refresh_plot(self.sources, snaps)

    def action_toggle_log_y(self) -> None:
        self.charts[0].toggle_log_y()  # the loss chart; samples/s stays linear
        self.poll_plots()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette lists every key's action too (as the dashboard's does)."""
        yield from super().get_system_commands(screen)
        yield from binding_commands(self, self.offered())

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            notes = COLUMNS.format(w=LOSS_SMOOTHING)
            self.push_screen(HelpScreen(self.offered(), "tuitrain watch --compare · keys", notes))
