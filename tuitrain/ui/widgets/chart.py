"""MetricChart: a plotext line chart with readable integer step ticks and theme colours.

Callers hand it already-decimated points (about two per column); a build costs a few
milliseconds at that size, against ~40 ms for 2,000 raw points.

Rendering: plotext's output is ANSI text with 24-bit colours only (the app's "auto" plotext
theme is RGB). Textual's generic path (`Text.from_ansi`, then Content wrapping and
formatting) cost as much as plotext's own build, at every redraw of every chart, so
`render_line` turns the ANSI lines into strips directly, with the same segments and styles
(offsets included, for text selection) as the generic path; anything unexpected falls back
to it.

Log y (`log_y`, the `l` key on the loss chart): the chart plots log10 of the values on a
linear axis, with ticks at round values (0.5, 1, 2) labelled as values. Not plotext's own
`yscale("log")`: plotext 5's build takes log10 of the figure's data in place, so a second
build of the same draw (a resize, a theme change, a text selection) takes it again and fails
(math domain error). Points at or below zero cannot be drawn on a log axis: left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text
from textual.color import Color
from textual.strip import Strip
from textual.style import Style
from textual.visual import Visual, visualize
from textual_plotext import PlotextPlot

AXIS_COLUMNS = 8  # columns plotext spends on the y tick labels and the frame
SGR = re.compile(r"\x1b\[([0-9;]*)m")
LOG_Y = "log y"  # what a panel's title adds in log-y mode
LOG_MULTS = ((1.0,), (1.0, 3.0), (1.0, 2.0, 5.0))  # tick mantissas per decade, sparse first


@dataclass(frozen=True, slots=True)
class Line:
    """One series to draw; `color` is a theme variable name (primary, warning...)."""

    xs: Sequence[float]
    ys: Sequence[float]
    color: str = "primary"
    scatter: bool = False


MAX_DRAWN = 1e304  # |y| drawn at most this: plotext scales (y - lo) x rows, which overflows
MIN_SPAN = 1e-300  # the narrowest y range drawn (subnormal spans divide to 0 or inf)
MAX_TICKS = 64  # no tick list is longer, whatever the range: every loop below is bounded


def nice_step(span: float, count: int) -> float:
    """A 1/2/5 x 10^k step giving about `count` intervals over `span` (1.0 for a span that
    is not a positive finite number)."""
    if not (span > 0 and math.isfinite(span)) or count < 1:
        return 1.0
    raw = span / count
    if not (raw > 0 and math.isfinite(raw)):
        return span
    power = 10.0 ** math.floor(math.log10(raw))
    if power == 0 or not math.isfinite(power):
        return raw
    for mult in (1, 2, 5, 10):
        if raw <= mult * power:
            return mult * power if math.isfinite(mult * power) else raw
    return raw


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """Round tick positions covering [lo, hi]; a single one when lo == hi. Computed by
    index, not by adding steps: a step below the values' float spacing cannot loop."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    span = hi - lo if math.isfinite(hi - lo) else hi / 2 - lo / 2
    step = nice_step(span, count)
    if not math.isfinite(span) or step <= 0 or span / step > MAX_TICKS:
        return [lo, hi]
    first = math.ceil(lo / step) if math.isfinite(lo / step) else None
    last = math.floor(hi / step) if math.isfinite(hi / step) else None
    if first is None or last is None or not 0 <= last - first < MAX_TICKS:
        return [lo, hi]
    ticks: list[float] = []
    for k in range(first, last + 1):
        value = round(k * step, 12) if abs(step) >= 1e-12 else k * step
        if lo - step * 1e-9 <= value <= hi + step * 1e-9 and (not ticks or value > ticks[-1]):
            ticks.append(value)
    return ticks or [lo, hi]


def log_ticks(lo: float, hi: float, count: int) -> list[float]:
    """Tick values for a log axis over [lo, hi] (both > 0): decades, or 1-3 or 1-2-5 per
    decade, the densest giving at most `count + 1`; every k-th decade when even decades are
    too many; round linear steps when the range is under a decade's worth of those."""
    if not (lo > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    first = max(math.floor(math.log10(lo)), -323)
    last = min(math.ceil(math.log10(hi)), 308)  # 10.0**309 overflows
    best: list[float] | None = None
    for mults in LOG_MULTS:
        ticks = [
            tick
            for k in range(first, last + 1)
            for m in mults
            if lo * (1 - 1e-9) <= (tick := float(f"{m * 10.0**k:.12g}")) <= hi * (1 + 1e-9)
            and math.isfinite(tick)
        ]
        if len(ticks) > count + 1:
            if best is None:  # too many decades: every k-th one
                every = math.ceil(len(ticks) / max(1, count))
                best = ticks[::every]
            break
        if len(ticks) >= 2:
            best = ticks
    return best if best is not None else nice_ticks(lo, hi, count)


def drawable_range(lo: float, hi: float, log: bool) -> tuple[float, float]:
    """A y range plotext can scale by: finite, ordered, and wide enough for its values.

    Equal values, a range of a few float steps (a loss stuck at one value, smoothed) or of
    subnormals is padded around its middle; values near ±1.8e308 are clamped so the span
    stays finite. On a log axis (values > 0) the pad is a factor."""
    lo, hi = min(lo, hi), max(lo, hi)
    if log:
        lo, hi = (min(max(v, 1e-300), MAX_DRAWN) for v in (lo, hi))
        if hi <= lo * (1 + 1e-9):
            return lo / 1.1, hi * 1.1
        return lo, hi
    lo, hi = max(-MAX_DRAWN, min(lo, MAX_DRAWN)), max(-MAX_DRAWN, min(hi, MAX_DRAWN))
    scale = max(abs(lo), abs(hi))
    if hi - lo <= max(scale * 1e-9, MIN_SPAN):
        middle = lo / 2 + hi / 2
        pad = max(abs(middle) * 0.05, MIN_SPAN * 10) if middle else 1.0
        if abs(middle) < MIN_SPAN:
            middle, pad = 0.0, 1.0  # subnormals and zeros: a unit range around zero
        lo, hi = middle - pad, middle + pad
        lo, hi = max(lo, -MAX_DRAWN * 1.5), min(hi, MAX_DRAWN * 1.5)
    return lo, hi


def finite_points(line: Line) -> Line:
    """The line without its non-finite points (NaN, inf: nothing to draw at)."""
    if all(math.isfinite(y) for y in line.ys):
        return line
    pts = [(x, y) for x, y in zip(line.xs, line.ys, strict=True) if math.isfinite(y)]
    return Line([x for x, _ in pts], [y for _, y in pts], line.color, line.scatter)


def clamped(ys: Sequence[float]) -> list[float]:
    """The values as drawn on a linear axis: within ±MAX_DRAWN (see drawable_range)."""
    return [max(-MAX_DRAWN, min(y, MAX_DRAWN)) for y in ys]


def log_title(title: str, log_y: bool) -> str:
    """A chart's title, with `· log y` while its y axis is logarithmic."""
    return f"{title} · {LOG_Y}" if log_y else title


def positive(line: Line) -> Line:
    """The line without its points at or below zero (a log axis cannot show them)."""
    if all(y > 0 for y in line.ys):
        return line
    pts = [(x, y) for x, y in zip(line.xs, line.ys, strict=True) if y > 0]
    return Line([x for x, _ in pts], [y for _, y in pts], line.color, line.scatter)


def format_tick(value: float) -> str:
    """Short tick labels: 1200 -> 1.2k, 0.25 -> 0.25, 3.0 -> 3."""
    if value == 0:
        return "0"
    mag = abs(value)
    if not math.isfinite(value) or mag >= 1e7 or mag < 1e-4:
        # 1.2e7, 1.25e9, 5e-324: short whatever the magnitude, yet three significant digits,
        # so that neighbouring ticks (1.2e9, 1.25e9) do not read the same
        mantissa, _, exponent = f"{value:.3g}".partition("e")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    if mag >= 10_000:
        return f"{value / 1000:.0f}k"
    if mag >= 1000:
        return f"{value / 1000:.1f}k".replace(".0k", "k")
    if mag >= 10 or float(value).is_integer():
        return f"{value:.0f}"
    if mag >= 1:
        return f"{value:.1f}"
    return f"{value:.2g}"


def finer_tick(value: float, digits: int) -> str:
    """A tick label with `digits` significant digits (98.44, 12.1k, 1.0001e9)."""
    if 1000 <= abs(value) < 1e7:
        return f"{value / 1000:.{max(1, digits - 3)}g}k"
    text = f"{value:.{digits}g}"
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def distinct_ticks(ticks: Sequence[float], yfmt: Callable[[float], str]) -> list[tuple[float, str]]:
    """(tick, label) pairs whose labels all differ: `yfmt`'s where they do, else with as
    few more digits as tell them apart (`finer_tick`; the caller's text around
    `format_tick`'s, such as a % sign, kept); for labels of the caller's own making, fewer
    ticks (each label at its first tick). A y axis never reads "98%" twice."""
    pairs = [(t, yfmt(t)) for t in ticks]
    if len({label for _, label in pairs}) == len(pairs):
        return pairs
    if not all(format_tick(t) in label for t, label in pairs):
        firsts: dict[str, float] = {}
        for t, label in pairs:
            firsts.setdefault(label, t)
        return [(t, label) for label, t in firsts.items()]
    for digits in range(3, 13):
        finer = [(t, label.replace(format_tick(t), finer_tick(t, digits), 1)) for t, label in pairs]
        if len({label for _, label in finer}) == len(finer):
            return finer
    return finer


class MetricChart(PlotextPlot):
    """A line chart over steps; `draw()` replaces the data and refreshes once."""

    _strips_key: object = None
    _strips: list[Strip] | None = None
    log_y: bool = False  # draw the y axis on a log scale (the next draw)
    drawn_scale: str = "linear"  # the y scale of the last draw: "linear" or "log"
    cursor: float | None = None  # a step marked by a vertical line (the metrics screen's cursor)
    _last_draw: tuple[Sequence[Line], dict[str, object]] | None = None

    def refresh(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._strips_key = None  # a new draw, theme or size: build again
        return super().refresh(*args, **kwargs)

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        style = self.visual_style
        key = (width, height, style, self.app.theme)
        if self._strips is None or key != self._strips_key or self.text_selection is not None:
            self._strips = self.render_strips(width, height, style)
            self._strips_key = key
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, style.rich_style)

    def render_strips(self, width: int, height: int, style: Style) -> list[Strip]:
        """The chart as strips: what `Visual.to_strips(Text.from_ansi(build))` gives."""
        plt = self._plot
        plt.plotsize(width, height)  # as PlotextPlot.render does
        plt._set_size(width, height)
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        ansi = plt.build()
        strips = None
        if self.text_selection is None and self.styles.content_align == ("left", "top"):
            strips = ansi_strips(ansi, width, height, style)
        if strips is None:  # the generic path
            strips = Visual.to_strips(
                self, visualize(self, Text.from_ansi(ansi)), width, height, style
            )
        return strips

    def plot_columns(self) -> int:
        """How many columns the data area has: the number of decimation buckets."""
        return max(4, self.size.width - AXIS_COLUMNS)

    def theme_rgb(self, name: str) -> tuple[int, int, int]:
        value = self.app.theme_variables.get(name) or self.app.theme_variables["foreground"]
        return Color.parse(value).rgb

    def draw(
        self,
        lines: Sequence[Line],
        *,
        hlines: Sequence[tuple[float, str]] = (),
        ylim: tuple[float, float] | None = None,
        yticks: Sequence[tuple[float, str]] | None = None,
        yfmt: Callable[[float], str] = format_tick,
    ) -> None:
        """Draw the lines (x = step) with round step ticks and horizontal guides.

        Units go in the panel's title or tick labels: plotext's ylabel costs a whole row.
        With `log_y`, points, limits and guides at or below zero are left out. A `cursor`
        within the steps drawn is a vertical line in the accent colour.
        """
        self._last_draw = (lines, {"hlines": hlines, "ylim": ylim, "yticks": yticks, "yfmt": yfmt})
        plt = self.plt
        plt.clear_figure()
        log = self.log_y
        lines = [finite_points(line) for line in lines]
        hlines = [(value, color) for value, color in hlines if math.isfinite(value)]
        self.drawn_scale = "log" if log else "linear"
        if log:
            lines = [positive(line) for line in lines]
            hlines = [(value, color) for value, color in hlines if value > 0]
            if ylim is not None and not ylim[0] > 0:
                ylim = None
        # y as plotted: log10 of the value on a log axis (see the module's docstring)
        to_plot: Callable[[float], float] = math.log10 if log else float
        xs_all = [x for line in lines for x in line.xs]
        ys_all = [y for line in lines for y in line.ys]
        for line in lines:
            if not line.xs:
                continue
            color = self.theme_rgb(line.color)
            ys = [to_plot(min(y, MAX_DRAWN)) for y in line.ys] if log else clamped(line.ys)
            if line.scatter:
                plt.scatter(list(line.xs), ys, marker="dot", color=color)
            else:
                plt.plot(list(line.xs), ys, marker="braille", color=color)
        if not xs_all:
            plt.xticks([], [])
            plt.yticks([], [])
            self.refresh()
            return
        x_lo, x_hi = min(xs_all), max(xs_all)
        if x_hi > x_lo:
            plt.xlim(x_lo, x_hi)
        xt = nice_ticks(x_lo, x_hi, max(2, self.size.width // 10))
        plt.xticks(xt, [format_tick(x) for x in xt])
        y_lo, y_hi = ylim if ylim else (min(ys_all), max(ys_all))
        for value, _color in hlines:
            y_lo, y_hi = min(y_lo, value), max(y_hi, value)
        tick_count = max(2, min(5, self.size.height // 2))
        y_lo, y_hi = drawable_range(y_lo, y_hi, log)
        plt.ylim(to_plot(y_lo), to_plot(y_hi))
        if yticks is None:
            yticks = distinct_ticks(
                (log_ticks if log else nice_ticks)(y_lo, y_hi, tick_count), yfmt
            )
        elif log:
            yticks = [(t, label) for t, label in yticks if t > 0]
        shown = [(t, label) for t, label in yticks if y_lo <= t <= y_hi]
        plt.yticks([to_plot(t) for t, _ in shown], [label for _, label in shown])
        for value, color_name in hlines:
            drawn = max(-MAX_DRAWN, min(value, MAX_DRAWN))
            plt.hline(to_plot(drawn), self.theme_rgb(color_name))
        if self.cursor is not None and x_lo <= self.cursor <= x_hi:
            plt.vline(self.cursor, self.theme_rgb("accent"))
        self.refresh()

    def redraw(self) -> None:
        """Draw the last draw's lines again (the cursor moved)."""
        if self._last_draw is not None:
            lines, options = self._last_draw
            self.draw(lines, **options)  # type: ignore[arg-type]


def ansi_strips(ansi: str, width: int, height: int, base: Style) -> list[Strip] | None:
    """Strips for plotext's ANSI lines (24-bit SGR colours and resets only), styled as
    Textual's Content would style them over `base`; None for anything else."""
    styles: dict[tuple[Color | None, Color | None], Style] = {}
    strips: list[Strip] = []
    for y, line in enumerate(ansi.split("\n")[:height]):
        segments: list[Segment] = []
        fg = bg = None
        x = pos = 0
        for match in SGR.finditer(line + "\x1b[0m"):
            start = match.start()
            if start > pos:
                text = line[pos:start]
                if "\x1b" in text:
                    return None
                if text:
                    st = styles.get((fg, bg))
                    if st is None:
                        st = styles[fg, bg] = base + Style(background=bg, foreground=fg)
                    segments.append(Segment(text, st.rich_style_with_offset(x, y)))
                    x += len(text)
            pos = match.end()
            codes = match.group(1)
            if codes in ("0", ""):
                fg = bg = None
                continue
            parts = codes.split(";")
            if len(parts) != 5 or parts[1] != "2" or parts[0] not in ("38", "48"):
                return None
            color = Color(int(parts[2]), int(parts[3]), int(parts[4]))
            if parts[0] == "38":
                fg = color
            else:
                bg = color
        if x > width or not line.isascii() and cell_len(SGR.sub("", line)) != x:
            return None  # wider than the chart or wide characters: leave it to Textual
        strips.append(Strip(segments, x))
    return strips
