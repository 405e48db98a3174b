"""The chart's direct ANSI-to-strips path gives what Textual's generic path gives."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.visual import Visual, visualize

from tuitrain.ui.widgets.chart import Line, MetricChart, ansi_strips


class ChartApp(App[None]):
    CSS = "MetricChart { width: 70; height: 16; }"

    def compose(self) -> ComposeResult:
        yield MetricChart()


def segments(strips: list) -> list[tuple[str, object]]:
    return [(seg.text, seg.style) for strip in strips for seg in strip]


async def test_direct_strips_equal_the_generic_path() -> None:
    app = ChartApp()
    async with app.run_test(size=(80, 20)) as pilot:
        chart = app.query_one(MetricChart)
        xs = list(range(1, 61))
        chart.draw(
            [
                Line(xs, [2.0 / (1 + 0.1 * x) for x in xs], color="primary"),
                Line(xs[::5], [1.5 / (1 + 0.1 * x) for x in xs[::5]], "warning", scatter=True),
            ]
        )
        await pilot.pause()
        width, height = chart.size
        style = chart.visual_style
        fast = chart.render_strips(width, height, style)
        plt = chart._plot
        ansi = plt.build()  # the same figure again (same size and theme)
        assert ansi_strips(ansi, width, height, style) is not None, "the fast path was used"
        generic = Visual.to_strips(
            chart, visualize(chart, Text.from_ansi(ansi)), width, height, style
        )
        assert len(fast) == len(generic) == height
        assert segments(fast) == segments(generic)
        assert "".join(seg.text for seg in fast[0]).strip(), "the chart drew something"


def test_unexpected_escape_codes_fall_back() -> None:
    from textual.style import Style

    assert ansi_strips("\x1b[1mbold\x1b[0m", 10, 1, Style()) is None  # not a 24-bit colour
    assert ansi_strips("x" * 12, 10, 1, Style()) is None  # wider than the chart
