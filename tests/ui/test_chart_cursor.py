"""Reading values off the metrics screen's charts: a cursor over a finished run's points."""

from __future__ import annotations

from pathlib import Path

from textual.widgets._footer import FooterKey

from tests.ui.pilot_tools import wait_for
from tests.ui.run_fixture import finished_run, watch_app
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.panels import all_metric_specs, metric_text, metric_unit
from tuitrain.ui.screens.metrics import MetricsScreen
from tuitrain.ui.widgets.cursor_chart import CursorChart


def drawn(store: MetricStore, name: str, chart: CursorChart) -> tuple[list[float], list[float]]:
    """The series' points as the chart draws them (decimated to its columns)."""
    return store.snapshot().get(name).decimate(chart.plot_columns())


def reads(store: MetricStore, name: str, step: float, value: float) -> str:
    """What the cursor should say: the step, and the value as the metric's title reads it."""
    spec = next(s for s in all_metric_specs(store.snapshot()) if s["name"] == name)
    return f"step {step:.0f}: {metric_text(value, spec)}{metric_unit(spec)}"


def marked(chart: CursorChart) -> bool:
    """A vertical line on the chart: it meets the frame's top edge (`┬`), which has no
    ticks of its own."""
    return "┬" in chart.render_line(0).text


async def open_metrics(pilot, app) -> MetricsScreen:  # noqa: ANN001 - a pilot and its app
    await pilot.press("g")
    screen = app.screen
    assert isinstance(screen, MetricsScreen)
    await wait_for(pilot, lambda: "val_loss" in screen.charts, 10, "the charts")
    await wait_for(pilot, lambda: screen.charts["loss"].xs, 10, "the loss chart drawn")
    return screen


async def test_the_cursor_reads_the_step_and_value_of_the_drawn_point(tmp_path: Path) -> None:
    app, store = watch_app(finished_run(tmp_path / "run"))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await open_metrics(pilot, app)
        loss = screen.charts["loss"]
        xs, ys = drawn(store, "loss", loss)
        assert len(xs) > 4 and loss.border_subtitle == ""
        assert not marked(loss)

        await pilot.press("right")  # no chart focused: the first takes the cursor
        assert loss.has_focus and loss.cursor == xs[0]
        assert loss.border_subtitle == reads(store, "loss", xs[0], ys[0])
        await pilot.press("right", "right")
        assert loss.border_subtitle == reads(store, "loss", xs[2], ys[2])
        await pilot.pause()
        assert marked(loss)  # the step's vertical line
        await pilot.press("end")
        assert loss.border_subtitle == reads(store, "loss", xs[-1], ys[-1])
        await pilot.press("left")
        assert loss.border_subtitle == reads(store, "loss", xs[-2], ys[-2])
        await pilot.press("home")
        assert loss.border_subtitle == reads(store, "loss", xs[0], ys[0])
        await pilot.press("left")  # at the first point: stays
        assert loss.border_subtitle == reads(store, "loss", xs[0], ys[0])

        await pilot.press("escape")  # the cursor goes, the screen stays
        await pilot.pause()
        assert loss.cursor is None and loss.border_subtitle == "" and not loss.has_focus
        assert not marked(loss)
        assert app.screen is screen
        await pilot.press("escape")
        assert app.screen is not screen


async def test_tab_carries_the_step_to_the_next_chart_which_reads_its_point_before_it(
    tmp_path: Path,
) -> None:
    """The validation loss has a point per evaluation: at a train step between two of
    them the cursor reads the one before."""
    app, store = watch_app(finished_run(tmp_path / "run"))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await open_metrics(pilot, app)
        loss, val = screen.charts["loss"], screen.charts["val_loss"]
        await wait_for(pilot, lambda: val.xs, 10, "the val_loss chart drawn")
        val_xs, val_ys = drawn(store, "val_loss", val)
        xs, _ = drawn(store, "loss", loss)
        step = next(x for x in xs if x > val_xs[0] and x not in val_xs)  # between two evals
        await pilot.press("home")
        while loss.cursor != step:
            await pilot.press("right")
        await pilot.press("tab")
        assert val.has_focus and loss.cursor is None and loss.border_subtitle == ""
        before = max(i for i, x in enumerate(val_xs) if x <= step)
        assert val.border_subtitle == reads(store, "val_loss", val_xs[before], val_ys[before])


async def test_the_cursor_keys_are_in_the_footer_within_80_columns(tmp_path: Path) -> None:
    app, _store = watch_app(finished_run(tmp_path / "run"))
    async with app.run_test(size=(80, 24)) as pilot:
        await open_metrics(pilot, app)
        for press in ((), ("right",)):  # nothing focused, then a chart with its cursor
            await pilot.press(*press)
            await pilot.pause()
            keys = {key.key: key for key in app.screen.query(FooterKey)}
            assert "right" in keys, list(keys)
            assert all(key.region.right <= 80 for key in keys.values()), {
                k: (key.region.x, key.region.right) for k, key in keys.items()
            }
        assert "escape" in keys and "home" in keys, list(keys)
        assert "g" not in keys  # the metrics screen is open: g offers no second one
        screens = len(app.screen_stack)
        await pilot.press("escape", "g")
        assert len(app.screen_stack) == screens
