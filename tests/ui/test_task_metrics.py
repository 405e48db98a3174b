"""A task's own metrics in the dashboard: the metrics screen (g), its filter (/), log y, and
the Loss panel's validation line read from the header's task declaration."""

from __future__ import annotations

from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.metrics.records import header_record
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.metrics import MetricsScreen, matching, metric_specs
from tuitrain.ui.widgets.loss import LossPanel

TASK = {
    "name": "tests.tasks.user_tasks:regression_task",
    "primary": "val_mae",
    "mode": "min",
    "tolerance": 0.05,
    "tokens": False,
    "metrics": [
        {"name": "mae", "split": "train", "goal": "min", "format": "float", "unit": ""},
        {"name": "val_loss", "split": "val", "goal": "min", "format": "float", "unit": ""},
        {"name": "val_mae", "split": "val", "goal": "min", "format": "float", "unit": ""},
    ],
}


def regression_store(task: dict | None = TASK) -> MetricStore:
    store = MetricStore()
    fields: dict = {"preset": "regression", "config": {}, "total_steps": 40}
    if task is not None:
        fields["task"] = task
    store.push(header_record(**fields))  # the contract's builder, as the engine writes it
    for step in range(2, 42, 2):
        store.push({"type": "train", "step": step, "loss": 1.0 / step, "mae": 2.0 / step})
        if step % 10 == 0:
            store.push(
                {"type": "eval", "step": step, "epoch": step / 10, "val_loss": 0.5 / step,
                 "val_mae": 1.0 / step + (0.2 if step == 40 else 0.0)}
            )  # fmt: skip
    return store


ALL = ["loss", "val_loss", "mae", "val_mae"]  # every series: the loss first, then the task's


def test_every_series_is_a_chart_the_declared_metrics_in_order() -> None:
    snap = regression_store().snapshot()
    assert [s["name"] for s in metric_specs(snap)] == ALL
    shown, problem = matching(metric_specs(snap), "val_")
    assert [s["name"] for s in shown] == ["val_loss", "val_mae"] and not problem
    shown, problem = matching(metric_specs(snap), "LOSS | mae")  # either, any case
    assert [s["name"] for s in shown] == ALL and not problem
    shown, problem = matching(metric_specs(snap), "[")  # literal text: no metric has it
    assert shown == [] and not problem


# Patterns that backtrack for minutes in a regular expression engine on these names, or are
# no regular expression at all: the filter takes each as text, found or not.
HOSTILE = ["(a+)+$", "(.*a){20}$", "([a-z]+)*!", "[", "\\", "a{99999}", "*", "?"]


def test_the_filter_is_literal_text_whatever_is_typed() -> None:
    names = ["a" * 60 + "!", "x" * 200, "grad(a+)+$norm", "[weird]", "a*b"]
    specs = [{"name": n, "goal": None, "format": "float", "unit": ""} for n in names]
    for pattern in HOSTILE:
        shown, problem = matching(specs, pattern)
        assert [s["name"] for s in shown] == [n for n in names if pattern.lower() in n]
        assert not problem
    assert [s["name"] for s in matching(specs, "(a+)+$")[0]] == ["grad(a+)+$norm"]
    # | separates texts: "(a" or "aa)*$"; the first is in one name
    assert [s["name"] for s in matching(specs, "(a|aa)*$")[0]] == ["grad(a+)+$norm"]
    shown, problem = matching(specs, "x" * 5000)  # a pasted wall of text: cut, and said so
    assert [s["name"] for s in shown] == ["x" * 200] and "cut to 200" in problem


def test_a_run_without_declarations_shows_every_series() -> None:
    snap = regression_store(task=None).snapshot()
    assert [s["name"] for s in metric_specs(snap)] == ALL


async def test_g_opens_one_chart_per_metric_and_slash_filters_them() -> None:
    app = TuitrainApp(store=regression_store())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        assert list(screen.charts) == ALL
        titles = {name: str(chart.border_title) for name, chart in screen.charts.items()}
        assert titles["val_mae"] == "val_mae 0.2250 (best 0.03333)"  # min; 4 significant digits
        assert "4 of 4 shown" in text_of(screen.query_one("#metrics-title"))
        chart = screen.charts["mae"]
        await wait_for(pilot, lambda: chart.plt.monitor.y, 5, "the mae chart drawn")
        assert len(chart.plt.monitor.y[0]) == 20  # every logged point of mae

        await pilot.press("slash")
        await pilot.press("v", "a", "l", "underscore", "m", "enter")
        await pilot.pause()
        assert list(screen.charts) == ["val_mae"]
        await pilot.press("slash", *["backspace"] * 5, *"(a+)+$", "enter")  # text, not regex
        await pilot.pause()
        assert list(screen.charts) == [] and "0 of 4 shown" in text_of(
            screen.query_one("#metrics-title")
        )
        await pilot.press("slash", *["backspace"] * 6, *"val_m", "enter")
        await pilot.pause()
        assert list(screen.charts) == ["val_mae"]
        assert "1 of 4 shown" in text_of(screen.query_one("#metrics-title"))

        await pilot.press("l")
        await pilot.pause()
        assert screen.charts["val_mae"].log_y
        assert str(screen.charts["val_mae"].border_title).endswith("log y")

        await pilot.press("escape")
        assert not isinstance(app.screen, MetricsScreen)


async def test_slash_on_the_dashboard_opens_the_filter() -> None:
    app = TuitrainApp(store=regression_store())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.screen, MetricsScreen)
        assert app.screen.query_one("#metrics-filter").has_focus


async def test_the_loss_panel_shows_the_tasks_primary_metric_and_its_best() -> None:
    app = TuitrainApp(store=regression_store())
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        panel = next(p for p in app.panels if isinstance(p, LossPanel))
        text = text_of(panel.summary_text)
        assert "mae 0.2250" in text and "best 0.0333" in text and "acc" not in text
