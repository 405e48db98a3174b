"""Pilot tests on recorded runs: a script's, a language model's and a CNN's dashboard at
80x24 and 100x30 show the panels their run has, with nothing dead and nothing collapsed."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from tests.ui.fake_records import charlm_records, filled_store, script_records, store_of
from tests.ui.pilot_tools import text_of
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.panels import panel_ids
from tuitrain.ui.widgets.chart import MetricChart
from tuitrain.ui.widgets.panel import MIN_CHART_ROWS, Panel
from tuitrain.ui.widgets.status import StatusBar

SIZES = [(80, 24), (100, 30)]


def stores() -> dict[str, MetricStore]:
    return {
        "script": store_of(script_records()),
        "charlm": store_of(charlm_records()),
        "cnn-bf16": filled_store("bf16", "cpu"),
        "cnn-fp16": filled_store("fp16", "cuda"),
    }


def screen_text(app: TuitrainApp) -> str:
    """What the panels, the status bar and the event log say, as plain text."""
    parts = [text_of(app.query_one(StatusBar))]
    for panel in app.panels:
        parts.append(str(panel.border_title))
        parts.append(text_of(panel.query_one(".summary", Static)))
    parts += [strip.text for strip in app.event_log.lines]
    return "\n".join(parts)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("run", ["script", "charlm", "cnn-bf16", "cnn-fp16"])
async def test_each_run_gets_its_panels_on_screen_and_no_chart_collapses(
    run: str, size: tuple[int, int]
) -> None:
    store = stores()[run]
    app = TuitrainApp(store=store)
    async with app.run_test(size=size) as pilot:
        for _ in range(2):  # the layout settles after the first draw
            app.poll_all()
            await pilot.pause()
        wanted = panel_ids(store.snapshot().header)
        assert [p.id for p in app.query(Panel) if p.display] == list(wanted)
        for widget in [*app.panels, app.event_log, app.status_bar]:
            region = widget.region
            assert region.width > 0 and region.height > 0, widget
            assert region.right <= size[0] and region.bottom <= size[1] - 1, widget
        for chart in app.query(MetricChart):
            if chart.display and chart.parent is not None and chart.parent.display:
                assert chart.size.height >= MIN_CHART_ROWS, (chart.parent, chart.size)
        text = screen_text(app)
    assert "0.0000" not in text  # a small value keeps its digits
    if run == "script":
        assert "waiting for the first log point" not in text  # no dead hosted-only panels
        assert "params" not in text and "GradScaler" not in text and "Data wait" not in text
        assert "steps/s" in text and "samples/s" not in text
        assert "epoch —" not in text and "step 0.0 ms" not in text
        assert "eval at step 199" in text
    elif run == "charlm":
        assert "tokens/s" in text and "tok/s" in text
        assert "nats/char" in text
    else:
        assert "samples/s" in text and "tokens/s" not in text


async def test_a_scripts_config_summary_and_tiny_numbers() -> None:
    app = TuitrainApp(store=store_of(script_records()))
    async with app.run_test(size=(120, 36)) as pilot:
        app.poll_all()
        await pilot.pause()
        config = text_of(app.query_one("#config").query_one(".summary", Static))
        summary = text_of(app.query_one("#summary").query_one(".summary", Static))
        metrics = text_of(app.query_one("#metrics").query_one(".summary", Static))
    assert "lr" in config and "0.05" in config and "project" in config and "demo" in config
    assert "tiny" in summary and "1.794e-10" in summary and "best_acc" in summary
    assert "train/acc" in metrics and "1.794e-10" in metrics and "lr" in metrics


async def test_a_language_models_sample_keeps_its_line_breaks() -> None:
    app = TuitrainApp(store=store_of(charlm_records()))
    async with app.run_test(size=(120, 36)) as pilot:
        app.poll_all()
        await pilot.pause()
        lines = [strip.text.rstrip() for strip in app.event_log.lines]
    assert any(line.endswith("ROMEO:") for line in lines)
    assert any(line.endswith("What say'st thou, friar?") for line in lines)
    assert not any("\\n" in line for line in lines)  # no escaped line breaks


@pytest.mark.parametrize("size", SIZES)
async def test_watch_shows_a_tuitrain_run_dirs_output(tmp_path: Path, size) -> None:  # noqa: ANN001
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "output.log").write_text("".join(f"line {i}\n" for i in range(50)))
    app = TuitrainApp(store=store_of(script_records()))
    app.watched_path = tmp_path / "metrics.jsonl"
    async with app.run_test(size=size) as pilot:
        app.poll_all()
        await pilot.pause()
        with (tmp_path / "output.log").open("a") as f:
            f.write("appended later\n")
        app.poll_output()
        await pilot.pause()
        pane = app.query_one("#output")
        assert pane.region.height >= 4 and pane.region.bottom <= size[1] - 1  # drawn, on screen
        lines = [strip.text.strip() for strip in app.output_log.lines]
    assert lines[-1] == "appended later" and "line 49" in lines


def test_a_watched_sample_sits_after_its_evaluation() -> None:
    """Read from a file (no arrival stamps), a sample event without a step goes by the step
    its message names: after that step's evaluation, before the next one."""
    from tuitrain.ui.widgets.events import ordered_records

    store = MetricStore()
    for rec in charlm_records():
        store.push(rec)  # as watch reads a file: no arrival stamp
    kinds = [
        (r.get("type"), r.get("step") or r.get("message", "")[:19])
        for r in ordered_records(store.snapshot())
    ]
    assert kinds == [
        ("eval", 40), ("event", "sample at step 40: "), ("eval", 80),
        ("event", "sample at step 80: "), ("eval", 120), ("event", "sample at step 120:"),
    ]  # fmt: skip
