"""Panel: the base of the metric panels, a summary line or two above a chart.

The app calls `refresh_text(frame)` at up to 2 Hz and `refresh_plot(snapshot)` at up to 1 Hz;
both return at once when nothing they show has changed. In compact layouts (80x24) the CSS
hides the chart and shows a one-line sparkline of the same series instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style as RichStyle
from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import Vertical
from textual.content import Content
from textual.dom import DOMNode
from textual.geometry import Size
from textual.widgets import Sparkline, Static

from tuitrain.core.text import strip_controls
from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.panels import spark_rows
from tuitrain.ui.view import Frame
from tuitrain.ui.widgets.chart import Line, MetricChart

MIN_CHART_ROWS = 6  # fewer: plotext draws axes with one or two rows of data between them


def esc(value: object) -> str:
    """Text from records (paths, messages, names) made safe inside content markup: shown
    literally, brackets included, without terminal control characters.

    Every `[` is escaped, not only those that look like a tag (textual.markup.escape's rule):
    an unclosed `[bold` in a value would pair with a `]` of the markup around it. A value that
    ends with a backslash gets a zero-width space after it, so it cannot escape the tag that
    follows it."""
    text = strip_controls(str(value)).replace("[", "\\[")
    return text + "\u200b" if text.endswith("\\") else text


def same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    """True when both hold the very same objects (identity, not equality: cheap)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def compact_layout(screen: DOMNode) -> bool:
    """The 80x24 layout (the app's breakpoint classes): summaries get two lines at most."""
    return screen.has_class("-narrow") or screen.has_class("-short")


def update_summary(summary: Static, text: str) -> None:
    """Show `text`, with a layout pass only when its wrapped height differs from the last one.

    A layout pass per record was most of the UI thread's busy time (BENCHMARKS.md, item 4),
    yet a summary's height rarely changes: same number of lines, same wrapping. Wrapping can
    change the height without a new "\\n", so the height is compared after wrapping at the
    widget's current width (Textual caches it per content and width). When no line is wider
    than the widget nothing wraps and the height is the line count: no wrapping pass needed.
    """
    width = summary.content_size.width
    no_size = Size(0, 0)  # unused by a Static: its height depends only on the width
    known = getattr(summary, "_summary_height", None)  # (width, height) after the last update
    if not width:
        before = None
    elif known is not None and known[0] == width:
        before = known[1]
    else:
        before = summary.get_content_height(no_size, no_size, width)
    summary.update(text, layout=False)
    if before is None:
        summary._summary_height = None  # type: ignore[attr-defined]
        summary.refresh(layout=True)
        return
    after = unwrapped_height(summary, width)
    summary._summary_height = (width, after)  # type: ignore[attr-defined]
    if after != before:
        summary.refresh(layout=True)


def unwrapped_height(summary: Static, width: int) -> int:
    """The summary's height at `width`: its line count when no line needs wrapping (cheap),
    else Textual's own wrapped height."""
    visual = summary.visual
    if isinstance(visual, Content):
        lines = visual.plain.split("\n")
        if all(cell_len(line) <= width for line in lines):
            return len(lines)
    no_size = Size(0, 0)
    return summary.get_content_height(no_size, no_size, width)


class ScaledSparkline(Sparkline):
    """A sparkline whose range is at least a tenth of its values' magnitude
    (`tuitrain.ui.panels.spark_range`): Textual's own scales min..max, so a 1% wobble of the
    throughput filled the whole height."""

    floor: tuple[float, float] | None = None  # the least range drawn (a panel's own scale)

    def render(self) -> RenderResult:
        width, height = self.size
        bars = "\n".join(spark_rows(list(self.data or ()), width, height, self.floor))
        color = self.app.theme_variables.get("primary")
        return Text(bars, style=RichStyle(color=color) if color else "")


class Panel(Vertical):
    """A bordered panel; subclasses say what the summary reads and which lines to plot."""

    TITLE: ClassVar[str] = ""
    HAS_CHART: ClassVar[bool] = True
    SERIES: ClassVar[tuple[str, ...]] = ()  # what the chart draws: redrawn when one changes

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="panel")
        self.border_title = self.TITLE
        self._text: str | None = None
        self._plot_key: tuple[object, ...] | None = None
        self._plot_data: tuple[object, ...] = ()
        self._spark_key: tuple[object, ...] | None = None
        self._spark_data: tuple[object, ...] = ()
        # Kept as references: the timers use them without querying the DOM.
        self.summary_text = Static("", classes="summary")
        self.chart = MetricChart(classes="chart")
        self.spark = ScaledSparkline([], classes="spark")

    def compose(self) -> ComposeResult:
        yield self.summary_text
        if self.HAS_CHART:
            yield self.chart
            yield self.spark

    # -- what subclasses provide -----------------------------------------------------------
    def summary(self, frame: Frame) -> str:
        """Content markup for the summary lines."""
        raise NotImplementedError

    def plot(self, chart: MetricChart, snap: Snapshot, buckets: int) -> None:
        """Draw this panel's chart from decimated series (`buckets` ~ plot columns)."""
        chart.draw(self.lines(snap, buckets))

    def lines(self, snap: Snapshot, buckets: int) -> Sequence[Line]:
        return ()

    def spark_series(self, snap: Snapshot) -> Series:
        """The series the compact sparkline shows."""
        return Series()

    def has_chart(self, snap: Snapshot) -> bool:
        """False when this run has nothing to plot here (e.g. no GradScaler)."""
        return self.HAS_CHART

    # -- driven by the app's timers --------------------------------------------------------
    def reset(self) -> None:
        """Forget what was drawn (a new run started)."""
        self._text = None
        self._plot_key = self._spark_key = None
        self._plot_data = self._spark_data = ()

    def refresh_text(self, frame: Frame) -> None:
        text = self.summary(frame)
        if text == self._text:
            return
        self._text = text
        update_summary(self.summary_text, text)
        self.set_class(not self.has_chart(frame.snap), "-no-chart")

    def fit_chart(self) -> None:
        """A sparkline instead of the chart where the chart would get fewer than
        MIN_CHART_ROWS rows (bare axes, `0` above `500`): the panel's height less its
        lines of text, which do not depend on which of the two is shown."""
        height = self.content_region.height
        drawn = (self.chart, self.spark)
        rows = height - sum(c.outer_size.height for c in self.children if c not in drawn)
        self.set_class(height > 0 and rows < MIN_CHART_ROWS, "-tiny")

    def refresh_plot(self, snap: Snapshot) -> None:
        """Redraw when a drawn series, the size or the theme changed (not on every record)."""
        if not self.HAS_CHART or not self.has_chart(snap):
            return
        self.fit_chart()
        # The store hands out the same Series object until that series changes; a new header
        # (a new run) redraws too.
        data = (snap.header, *(snap.series.get(name) for name in self.SERIES))
        chart = self.chart
        if chart.display and chart.size.area:
            key: tuple[object, ...] = (chart.size, self.app.theme)
            if key != self._plot_key or not same_objects(data, self._plot_data):
                self._plot_key, self._plot_data = key, data
                self.plot(chart, snap, chart.plot_columns())
            return
        spark = self.spark
        if spark.display and spark.size.width:
            key = (spark.size.width,)
            if key != self._spark_key or not same_objects(data, self._spark_data):
                self._spark_key, self._spark_data = key, data
                _xs, ys = self.spark_series(snap).decimate(spark.size.width)
                spark.data = ys
