"""Metrics screen (`g`): a chart for every series the run holds, filtered by name as you
type (`/`; enter closes the box and keeps the filter), log y with `l`.

The filter is literal text, case-insensitive, found anywhere in a metric's name or in the name
a script logged it under (`eval_top1` finds `val_top1`, charted as `val_top1 (eval_top1)`);
`|` separates alternatives (`loss|mae`). No regular expression: a pattern such as `(a+)+$`
backtracks for minutes in Python's `re`, which cannot be time-boxed, on the UI thread and,
holding the GIL, in the training it hosts. A literal filter costs the names' length at most;
its text is capped at MAX_FILTER characters.

The metrics are every series the run holds: the loss and the val loss, the run's own
metrics (what its task declares, a script's keys), then the contract's measurements (lr,
grad norm, throughput, step time, data wait, scaler, memory). More than fit scroll.
Each chart's title gives the metric's last value and
its best so far (by the declared goal); the charts redraw at 1 Hz from the app's store.

Values are read off a chart with its cursor (`tuitrain.ui.widgets.cursor_chart`): an arrow
key, `home` or `end` puts it on the first chart (tab or a click picks another), the bottom
border gives the step and the value there, and `escape` leaves it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static

from tuitrain.metrics.store import Snapshot
from tuitrain.ui.panels import all_metric_specs, metric_label, metric_text, metric_unit
from tuitrain.ui.view import pick_unit
from tuitrain.ui.widgets.chart import Line, format_tick, log_title
from tuitrain.ui.widgets.cursor_chart import CursorChart
from tuitrain.ui.widgets.panel import esc

MAX_CHARTS = 30  # more metrics than this: the first ones, and the filter narrows the rest
MAX_FILTER = 200  # characters of filter text
FILTER_DELAY_S = 0.12  # a filter applies as you type, once the keys pause this long


def metric_specs(snap: Snapshot) -> list[dict[str, Any]]:
    """[{name, goal, format, unit}] of every series the run holds: the loss and val loss,
    the run's own metrics (its task's, a script's keys), then lr, the grad norm, throughput,
    step time, data wait, the scaler and memory (`tuitrain.ui.panels.all_metric_specs`)."""
    return all_metric_specs(snap)


def best_value(values: tuple[float, ...], goal: str | None) -> float | None:
    if not values or goal not in ("min", "max"):
        return None
    return min(values) if goal == "min" else max(values)


def value_reader(spec: dict[str, Any]) -> Callable[[float], str]:
    """How the cursor reads a value of this metric: as its title does (85.31%, 1.20 GiB)."""
    return lambda value: f"{metric_text(value, spec)}{metric_unit(spec)}"


def matching(specs: list[dict[str, Any]], pattern: str) -> tuple[list[dict[str, Any]], str]:
    """The specs whose name or alias holds one of the pattern's `|`-separated texts
    (case-insensitive, literal), and '' or why the pattern is not used as given."""
    problem = ""
    if len(pattern) > MAX_FILTER:
        pattern, problem = pattern[:MAX_FILTER], f"filter cut to {MAX_FILTER} characters"
    terms = [t.strip().casefold() for t in pattern.split("|")]
    terms = [t for t in terms if t]
    if not terms:
        return specs, problem
    names = [(s, s["name"].casefold(), str(s.get("alias") or "").casefold()) for s in specs]
    return [s for s, name, alias in names if any(t in name or t in alias for t in terms)], problem


class MetricsScreen(Screen[None]):
    """A grid of charts, one per metric; `/` filters by name, `l` log y, escape back."""

    AUTO_FOCUS = ""  # nothing: the (hidden) filter box takes keys only once / opens it

    DEFAULT_CSS = """
    MetricsScreen #metrics-top { height: auto; padding: 0 1; }
    MetricsScreen #metrics-filter { display: none; }
    MetricsScreen #metrics-filter.-open { display: block; }
    MetricsScreen #metrics-scroll { height: 1fr; }
    MetricsScreen #metrics-grid { grid-size: 3; grid-gutter: 0 1; height: auto; grid-rows: 12; }
    MetricsScreen .metric { border: round $primary-darken-2; height: 12; }
    MetricsScreen .metric:focus { border: round $accent; }
    """
    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Filter metrics by name (text; a|b: either)"),
        Binding("l", "toggle_log_y", "Log y", tooltip="Log-scale y axes, or linear"),
        Binding(
            "right",
            "cursor('move', 1)",
            "Cursor",
            key_display="←/→",
            tooltip="Read values off the first chart (tab: the next chart)",
        ),
        Binding("left", "cursor('move', -1)", "Cursor", show=False),
        Binding("home", "cursor('jump', 0)", "First point", show=False),
        Binding("end", "cursor('jump', -1)", "Last point", show=False),
        Binding("escape,m,q", "close", "Back", tooltip="Back to the dashboard"),
    ]

    def __init__(self, pattern: str = "") -> None:
        super().__init__()
        self.pattern = pattern
        self.log_y = False
        self.charts: dict[str, CursorChart] = {}
        self._shown: tuple[str, ...] | None = None
        self._drawn: dict[str, object] = {}
        self._filter_timer: Timer | None = None  # the pending as-you-type redraw
        self.cursor_step: float | None = None  # the cursor's step as the focus left a chart

    def compose(self) -> ComposeResult:
        with Vertical(id="metrics-top"):
            yield Static("", id="metrics-title", markup=True)
            yield Input(
                value=self.pattern[:MAX_FILTER], id="metrics-filter", max_length=MAX_FILTER,
                placeholder="text in metric names (case-insensitive; a|b for either)",
            )  # fmt: skip
        with VerticalScroll(id="metrics-scroll"):  # more charts than fit: scroll to them
            yield Grid(id="metrics-grid")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1.0, self.redraw)
        self.call_after_refresh(self.redraw)

    def store_snapshot(self) -> Snapshot:
        return self.app.store.snapshot()  # type: ignore[attr-defined]

    def redraw(self) -> None:
        snap = self.store_snapshot()
        specs = metric_specs(snap)
        shown, problem = matching(specs, self.pattern)
        names = tuple(s["name"] for s in shown[:MAX_CHARTS])
        grid = self.query_one("#metrics-grid", Grid)
        if names != self._shown:  # the set of charts changed: rebuild the grid
            self._shown = names
            grid.remove_children()
            self.charts = {n: CursorChart(classes="metric") for n in names}
            if self.charts:
                grid.mount_all(self.charts.values())
            else:
                grid.mount(Static("no metric matches the filter" if specs else "no metric yet"))
            self._drawn = {}
            self.call_after_refresh(self.redraw)  # the new charts have a size after layout
        title = (
            f"[b]Metrics[/b] · {len(names)} of {len(specs)} shown"
            + (f" · filter [b]{esc(self.pattern)}[/b]" if self.pattern else "")
            + (f" · [$error]{esc(problem)}[/]" if problem else "")
            + " · [$foreground-muted]/ filter, l log y, ←/→ values, escape back[/]"
        )
        self.query_one("#metrics-title", Static).update(title)
        by_name: Mapping[str, dict[str, Any]] = {s["name"]: s for s in shown}
        for name, chart in self.charts.items():
            series = snap.get(name)
            spec = by_name[name]
            best = best_value(series.ys, spec.get("goal"))
            label = f"{metric_label(spec)} {metric_text(series.last, spec)}{metric_unit(spec)}"
            if best is not None:
                label += f" (best {metric_text(best, spec)})"
            chart.border_title = esc(log_title(label, self.log_y))
            key = (series, chart.size, self.log_y)
            if self._drawn.get(name) == key or not chart.size.area:
                continue
            self._drawn[name] = key
            chart.log_y = self.log_y
            xs, ys = series.decimate(max(chart.plot_columns(), 1))
            color = "warning" if name.startswith("val_") else "primary"
            line = Line(xs, ys, color=color, scatter=name.startswith("val_"))
            chart.note = ""
            if spec["format"] == "pct":  # a share: drawn and labelled in percent
                line = Line(xs, [y * 100 for y in ys], line.color, line.scatter)
                chart.draw([line], yfmt=lambda t: f"{format_tick(t)}%")
            elif spec["format"] == "bytes":  # memory: the axis in the title's unit, not bytes
                div, unit = pick_unit(max((abs(y) for y in ys), default=0.0))
                line = Line(xs, [y / div for y in ys], line.color, line.scatter)
                chart.note = f"y in {unit}"
                chart.draw([line])
            else:
                chart.draw([line])
            chart.set_points(xs, ys, value_reader(spec))

    def action_filter(self) -> None:
        box = self.query_one("#metrics-filter", Input)
        box.add_class("-open")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """As you type: redraw once the keys pause (a burst is one redraw), as the runs
        table's filter does."""
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_timer = self.set_timer(FILTER_DELAY_S, self.apply_filter)

    def apply_filter(self) -> None:
        self._filter_timer = None
        pattern = self.query_one("#metrics-filter", Input).value.strip()[:MAX_FILTER]
        if pattern != self.pattern:
            self.pattern = pattern
            self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter closes the box; the filter stays."""
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self.apply_filter()
        event.input.remove_class("-open")
        self.set_focus(None)

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        """A chart that loses the focus hands its cursor's step to the next one (tab: the
        same step on the next chart); escape, which clears it first, hands none."""
        if isinstance(event.widget, CursorChart):
            self.cursor_step = event.widget.cursor
            event.widget.place(None)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, CursorChart) and self.cursor_step is not None:
            event.widget.place(self.cursor_step)

    def action_cursor(self, how: str, value: int) -> None:
        """An arrow key, home or end with no chart focused: the first chart takes the cursor."""
        chart = next(iter(self.charts.values()), None)
        if chart is not None:
            chart.focus()
            (chart.action_move if how == "move" else chart.action_jump)(value)

    def action_toggle_log_y(self) -> None:
        self.log_y = not self.log_y
        self._drawn = {}
        self.redraw()

    def action_close(self) -> None:
        self.app.pop_screen()
