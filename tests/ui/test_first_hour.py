"""Issue #48, a newcomer's first hour: what the help, the footer, the filters and the event
log say match what the screen shows."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.containers import VerticalScroll
from textual.widgets import OptionList
from textual.widgets._footer import FooterKey

from tests.ui.fake_records import filled_store, script_records, store_of
from tests.ui.pilot_tools import text_of, wait_for
from tests.ui.test_detach_hangup import detached_in_pty
from tuitrain.core.config import load_preset
from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.help import HelpScreen
from tuitrain.ui.screens.metrics import MetricsScreen
from tuitrain.ui.terminal import LEAVE_AND_CLEAR
from tuitrain.ui.widgets.events import EventLog

pytestmark = pytest.mark.timeout(120)


async def test_help_describes_a_script_runs_panels_not_the_engines() -> None:
    """A script's run (header `client: true`) has no GradScaler, no data wait and counts
    steps: its help says what its panels are (Config, Summary, steps/s), not the engine's."""
    app = TuitrainApp(store=store_of(script_records()))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        notes = text_of(app.screen.query_one("#help-notes"))
    for absent in ("GradScaler", "Data wait", "samples/s"):
        assert absent not in notes, absent
    for present in ("Config:", "Summary:", "steps/s", "Metrics:", "Events:"):
        assert present in notes, present


async def test_help_describes_an_fp16_runs_scaler_and_data_wait() -> None:
    app = TuitrainApp(store=filled_store("fp16"))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        notes = text_of(app.screen.query_one("#help-notes"))
    for present in ("GradScaler", "Data wait", "samples/s", "Overview:"):
        assert present in notes, present
    assert "Config:" not in notes and "Summary:" not in notes


async def test_the_help_says_it_scrolls_where_it_does_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 80x24 the dashboard's keys and notes are taller than the dialog: it scrolls, with
    its bar and a `↓ more` on its border; at 160x48 everything fits and neither shows."""
    monkeypatch.setattr(TuitrainApp, "launch", lambda self, host: None)
    cfg = load_preset("fashion-mini", ["train.device=cpu"])
    for size, scrolls in (((80, 24), True), ((160, 48), False)):
        app = TuitrainApp(host=RunHost(cfg, MetricStore()))
        async with app.run_test(size=size) as pilot:
            await pilot.press("question_mark")
            await pilot.pause()
            scroll = app.screen.query_one(VerticalScroll)
            dialog = app.screen.query_one("#help-dialog")
            assert scroll.outer_size.height <= dialog.size.height, size
            assert (scroll.max_scroll_y > 0) is scrolls, size
            assert scroll.show_vertical_scrollbar is scrolls, size
            assert ("more" in str(dialog.border_subtitle)) is scrolls, size
            if scrolls:
                await pilot.press("down", "down")
                assert scroll.scroll_y > 0  # the keys scroll it (it has the focus)


async def test_the_preset_picker_cuts_a_long_description_at_a_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(TuitrainApp, "launch", lambda self, host: None)
    cfg = load_preset("fashion-mini", ["train.device=cpu"])
    app = TuitrainApp(host=RunHost(cfg, MetricStore()))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        await pilot.pause()
        options = app.screen.query_one(OptionList)
        prompt = str(options.get_option("charlm-fast").prompt)
    assert prompt.endswith("(nanoGPT's CPU recipe…"), prompt  # not "recipe: 1.9"


@pytest.mark.slow
def test_after_a_detach_the_terminal_shows_line_logs_from_the_runs_figures(
    tmp_path: Path, ui_overrides: Callable[..., list[str]]
) -> None:
    """`q` then `d` on a real terminal (a pty): the screen is cleared of the dashboard
    (nothing of its frame after the clear), and the first line is the run's last log point,
    step and loss, not a progress note saying there is no log point yet."""
    metrics = tmp_path / "first-run" / "metrics.jsonl"
    sets = [arg for o in ui_overrides(epochs=2) for arg in ("--set", o)]  # 16 steps
    proc, term, detached = detached_in_pty(metrics, sets, columns=80, lines=24)
    try:
        ended = lambda: b"tuitrain: run dir" in term.seen[detached:]  # noqa: E731
        term.read_until(ended, "the run's end", proc)
        code = proc.wait(timeout=60)
    finally:
        os.close(term.master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0
    after = term.seen[detached:].decode(errors="replace")
    assert LEAVE_AND_CLEAR in after, after[:400]
    lines = after.rsplit(LEAVE_AND_CLEAR, 1)[1].replace("\r", "").splitlines()
    assert not any("╭" in line or "│" in line for line in lines), lines  # no frame after it
    first = lines[0]
    assert re.search(r"step +\d+/16 \| epoch [\d.]+ \| loss \d", first), lines
    assert "no log point" not in first
    assert "dashboard closed at step" in lines[1], lines


async def test_g_is_in_the_footer_where_it_acts_and_the_footer_fits_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dashboard (a hosted run) and a viewer both show `g Metrics` in the footer, and
    every key of it fits 80 columns (q Quit last)."""
    monkeypatch.setattr(TuitrainApp, "launch", lambda self, host: None)
    cfg = load_preset("fashion-mini", ["train.device=cpu"])
    for app in (TuitrainApp(host=RunHost(cfg, MetricStore())), TuitrainApp(store=filled_store())):
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            keys = {key.key: key for key in app.screen.query(FooterKey)}
            assert "g" in keys and keys["g"].description == "Metrics", list(keys)
            assert "q" in keys and all(key.region.right <= 80 for key in keys.values())
            await pilot.press("g")
            assert isinstance(app.screen, MetricsScreen)


async def test_the_metrics_filter_applies_as_you_type() -> None:
    """As in `tuitrain runs`: the charts narrow while typing, before enter."""
    app = TuitrainApp(store=store_of(script_records()))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        await wait_for(pilot, lambda: len(screen.charts) > 2, 10, "the charts")
        await pilot.press("slash", *"tiny")
        await wait_for(pilot, lambda: list(screen.charts) == ["tiny"], 5, "the filter, no enter")
        assert screen.query_one("#metrics-filter").has_focus  # still typing
        await pilot.press("enter")
        await pilot.pause()
        assert list(screen.charts) == ["tiny"] and screen.pattern == "tiny"


def event_rows(log: EventLog) -> list[tuple[str, str]]:
    """(step column, text) per line of the event log, continuation lines left out."""
    rows = []
    for strip in log.lines:
        step, _, text = strip.text.partition(" · ")
        if text:
            rows.append((step.strip(), text.strip()))
    return rows


def pause_resume_run(tmp_path: Path) -> Path:
    """A run's file as the engine wrote it before its pause events had a step: trained to
    step 220 (a log point every 10), paused at 223, resumed, an eval at 230."""
    from tests.ui.fake_records import header, train

    lines = [header("bf16", "cpu", total_steps=400)]
    for step in range(10, 230, 10):
        lines.append(train(step, "bf16", False))
    lines += [
        {"type": "event", "level": "info", "message": "checkpoint saved at step 200",
         "kind": "checkpoint", "step": 200},
        {"type": "event", "level": "info", "message": "paused at step 223", "kind": "pause"},
        {"type": "event", "level": "info", "message": "resumed at step 223", "kind": "resume"},
        {"type": "eval", "step": 210, "epoch": 1.0, "val_loss": 0.5, "val_acc": 0.8},
        {"type": "eval", "step": 230, "epoch": 1.1, "val_loss": 0.4, "val_acc": 0.85},
    ]  # fmt: skip
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


async def test_the_event_logs_step_column_is_the_step_the_event_names(tmp_path: Path) -> None:
    """The dashboard stamps an event with the last train step it saw (220): the column
    said 220 beside "paused at step 223". An event's own step wins."""
    store = store_of([json.loads(line) for line in pause_resume_run(tmp_path).open()])
    app = TuitrainApp(store=store)
    async with app.run_test(size=(120, 36)) as pilot:
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: len(event_rows(log)) >= 5, 10, "the event log")
        rows = event_rows(log)
    assert ("223", "paused at step 223") in rows and ("223", "resumed at step 223") in rows
    for step, text in rows:
        named = re.search(r"at step (\d+)", text)
        if named:
            assert step == named.group(1), (step, text)


async def test_watch_lists_events_in_the_order_of_their_steps(tmp_path: Path) -> None:
    """A file read by `watch` has no arrival stamps: a pause event without a step field
    went with the checkpoint before it (step 200) and came before the eval at step 210."""
    from tuitrain.rundir.follow import JsonlFollower

    store = MetricStore()
    JsonlFollower(pause_resume_run(tmp_path), store).poll()
    app = TuitrainApp(store=store)
    async with app.run_test(size=(120, 36)) as pilot:
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: len(event_rows(log)) >= 6, 10, "the event log")
        rows = event_rows(log)
    steps = [int(step) for step, _ in rows if step]
    assert steps == sorted(steps), rows
    texts = [text for _, text in rows]
    epoch_1 = next(i for i, text in enumerate(texts) if text.startswith("epoch 1 done"))
    assert texts.index("paused at step 223") > epoch_1, rows  # the eval at 210 came first
