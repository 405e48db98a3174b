"""`l`: a log-scale y axis on the loss chart, on the dashboard and in `watch --compare`.

What is checked is what the user sees: the panel's title, and where the y tick labels land
on the rendered chart (on a log axis 0.5, 1 and 2 are equally spaced; on a linear one 1 to 2
is twice 0.5 to 1), plus the chart's drawn scale and the help and palette entries.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Sparkline

from tests.ui.fake_records import filled_store
from tests.ui.pilot_tools import text_of
from tests.ui.test_compare import run_a, run_b, sources, write_run
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.compare import CompareApp
from tuitrain.ui.screens.help import HelpScreen
from tuitrain.ui.widgets.chart import Line, MetricChart, log_ticks
from tuitrain.ui.widgets.loss import LossPanel

pytestmark = pytest.mark.timeout(120)

TICK = re.compile(r"^\s*([0-9.]+k?)┤")


def tick_rows(chart: MetricChart) -> dict[float, int]:
    """The y tick labels of the chart as rendered now: value -> row."""
    width, height = chart.size
    rows = {}
    for row, strip in enumerate(chart.render_strips(width, height, chart.visual_style)):
        match = TICK.match(strip.text)
        if match:
            rows[float(match.group(1))] = row
    return rows


def evenly_spaced(rows: dict[float, int], values: tuple[float, ...]) -> bool:
    gaps = {rows[b] - rows[a] for a, b in zip(values, values[1:], strict=False)}
    return len(gaps) == 1


def loss_panel(app: TuitrainApp) -> LossPanel:
    return next(p for p in app.panels if isinstance(p, LossPanel))


# ---------------------------------------------------------------------------------- dashboard
async def test_l_toggles_log_y_on_the_dashboards_loss_chart() -> None:
    app = TuitrainApp(store=filled_store())  # loss from ~2.3 down to ~0.3
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        panel = loss_panel(app)
        chart = panel.chart
        assert panel.border_title == "Loss" and chart.drawn_scale == "linear"
        linear = tick_rows(chart)
        assert {0.5, 1.0, 2.0} <= set(linear)
        assert not evenly_spaced(linear, (0.5, 1.0, 2.0))

        await pilot.press("l")
        assert panel.border_title == "Loss · log y"
        assert chart.log_y and chart.drawn_scale == "log"  # redrawn at once, not at the next tick
        log = tick_rows(chart)
        assert {0.5, 1.0, 2.0} <= set(log) and evenly_spaced(log, (0.5, 1.0, 2.0))
        assert log[0.5] > log[1.0] > log[2.0]  # still upwards
        # What plotext was given: log10 of the loss, on a linear axis
        loss = app.store.snapshot().get("loss")
        plotted = [y for ys in chart.plt.monitor.y for y in ys]
        assert min(plotted) == pytest.approx(math.log10(min(loss.ys)), abs=0.02)
        assert max(plotted) == pytest.approx(math.log10(max(loss.ys)), abs=0.02)
        assert tick_rows(chart) == log  # a second build of the same draw draws the same

        await pilot.press("l")
        assert panel.border_title == "Loss" and not chart.log_y
        assert chart.drawn_scale == "linear"
        assert tick_rows(chart) == linear
        others = [p.chart for p in app.panels if p is not panel]
        assert all(c.drawn_scale == "linear" for c in others)


async def test_compact_layout_sparkline_follows_log_y() -> None:
    """At 80x24 the loss panel shows a sparkline instead of the chart: log10 in log mode."""
    app = TuitrainApp(store=filled_store())
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_all()
        await pilot.pause()
        panel = loss_panel(app)
        spark = panel.query_one(Sparkline)
        assert spark.display and spark.data and min(spark.data) > 0  # the loss itself
        await pilot.press("l")
        await pilot.pause()
        assert panel.border_title == "Loss · log y"
        assert spark.data and min(spark.data) < 0  # log10 of a loss under 1


async def test_dashboard_help_and_palette_list_l() -> None:
    app = TuitrainApp(store=filled_store())
    async with app.run_test(size=(120, 36)) as pilot:
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert "Log y (l)" in commands
        commands["Log y (l)"].callback()
        await pilot.pause()
        assert loss_panel(app).chart.log_y  # the palette entry runs the same action
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = text_of(app.screen.query_one("#help-keys"))
        assert re.search(r"^l +Log y +Loss chart: log-scale y axis", keys, re.M), keys


# ---------------------------------------------------------------------------------- compare
def compare_app(tmp_path: Path) -> CompareApp:
    srcs = sources(write_run(tmp_path / "fp32-run", run_a()), write_run(tmp_path / "b", run_b()))
    for s in srcs:
        JsonlFollower(s.path, s.store).poll()
    return CompareApp(srcs)


async def test_l_toggles_log_y_in_compare(tmp_path: Path) -> None:
    app = compare_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        loss, rate, metric = app.charts  # the primary metric's chart stays linear too
        title = str(loss.border_title)
        assert title.startswith("train loss") and "log y" not in title
        linear = tick_rows(loss)

        await pilot.press("l")
        assert str(loss.border_title) == f"{title} · log y"
        assert loss.drawn_scale == "log"
        log = tick_rows(loss)
        assert {0.5, 1.0} <= set(log) and log != linear
        assert rate.drawn_scale == "linear" and "log y" not in str(rate.border_title)
        assert metric.drawn_scale == "linear" and "log y" not in str(metric.border_title)

        await pilot.press("l")
        assert str(loss.border_title) == title and loss.drawn_scale == "linear"
        assert tick_rows(loss) == linear


async def test_compare_help_and_palette_list_l(tmp_path: Path) -> None:
    app = compare_app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert {"Log y (l)", "Help (?)", "Quit (q)"} <= set(commands), list(commands)
        commands["Log y (l)"].callback()
        await pilot.pause()
        assert app.charts[0].log_y
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = text_of(app.screen.query_one("#help-keys"))
        assert re.search(r"^l +Log y +Loss chart: log-scale y axis", keys, re.M), keys


# ---------------------------------------------------------------------------------- the chart
class ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield MetricChart()


async def test_log_y_leaves_out_values_at_or_below_zero() -> None:
    app = ChartApp()
    async with app.run_test(size=(60, 16)) as pilot:
        chart = app.query_one(MetricChart)
        chart.log_y = True
        chart.draw(
            [Line([1, 2, 3, 4, 5], [0.0, -1.0, 0.01, 1.0, 100.0])],
            hlines=[(0.0, "error"), (10.0, "warning")],
        )
        await pilot.pause()
        assert [y for ys in chart.plt.monitor.y for y in ys] == [-2.0, 0.0, 2.0]
        rows = tick_rows(chart)
        assert {0.01, 1.0, 100.0} <= set(rows)
        assert evenly_spaced(rows, (0.01, 1.0, 100.0))
        chart.draw([Line([1, 2], [-1.0, 0.0])])  # nothing drawable: an empty chart
        await pilot.pause()
        assert tick_rows(chart) == {}


@pytest.mark.parametrize(
    ("lo", "hi", "count", "expected"),
    [
        (0.3, 2.3, 5, [0.5, 1.0, 2.0]),  # a typical loss: 1-2-5 inside one decade
        (0.05, 2.3, 5, [0.05, 0.1, 0.2, 0.5, 1.0, 2.0]),
        (0.05, 2.3, 3, [0.1, 0.3, 1.0]),  # 1-2-5 would be 6 ticks: 1-3
        (0.001, 3.0, 5, [0.001, 0.01, 0.1, 1.0]),  # decades
        (1e-6, 1e6, 4, [1e-6, 1e-2, 1e2, 1e6]),  # every fourth decade
        (0.31, 0.45, 3, [0.35, 0.4, 0.45]),  # under one 1-2-5 step: round linear steps
        (0.7, 0.7, 3, [0.7]),
    ],
)
def test_log_ticks(lo: float, hi: float, count: int, expected: list[float]) -> None:
    assert log_ticks(lo, hi, count) == pytest.approx(expected)
