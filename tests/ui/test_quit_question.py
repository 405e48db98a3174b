"""q over a live run asks first: stop and save, detach, or cancel; ctrl+c and ctrl+q ask too."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ui.pilot_tools import record_notifications, text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore
from tuitrain.ui import app as app_module
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.quit import QuitScreen
from tuitrain.ui.session import RunEnded

pytestmark = pytest.mark.timeout(120)


def live_app(overrides: list[str]) -> TuitrainApp:
    cfg = load_preset("fashion-mini", overrides)
    return TuitrainApp(host=RunHost(cfg, MetricStore(), steerable=True), overrides=overrides)


def latest_step_of(app: TuitrainApp) -> int:
    return int((app.store.snapshot().latest or {}).get("step") or 0)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


async def test_ctrl_c_asks_and_escape_cancels(ui_overrides: Callable[..., list[str]]) -> None:
    """ctrl+c opens the question (no Textual toast with raw markup); escape keeps training;
    ctrl+q asks too, and ctrl+q in the question stops and saves (exit code 4)."""
    app = live_app(ui_overrides(epochs=40))
    messages = record_notifications(app)
    async with app.run_test(size=(120, 36)) as pilot:
        host = app.host
        assert host is not None
        await wait_for(pilot, lambda: latest_step_of(app) >= 2, what="step 2")
        await pilot.press("ctrl+c")
        assert isinstance(app.screen, QuitScreen)
        text = text_of(app.screen.query_one("#quit-text"))
        assert "stop and save" in text and "detach" in text and "cancel" in text
        assert f"tuitrain watch {host.run_dir}" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, QuitScreen)
        before = latest_step_of(app)
        await wait_for(pilot, lambda: latest_step_of(app) > before, what="training goes on")
        assert not host.control.stop_requested
        await pilot.press("ctrl+q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == EXIT_STOPPED
    assert not any("[b]" in m for m in messages), messages
    assert host.join(10)
    end = records(host.run_dir)[-1]
    assert end["type"] == "end" and end["status"] == "stopped"


async def test_q_asks_between_a_switched_runs_end_and_the_next_start(
    ui_overrides: Callable[..., list[str]],
) -> None:
    """A preset switch (p): the old run has ended and the next preset starts when the app
    hears of it. q in between asks too (it used to leave at once, no question); stop in the
    question then stops the run that started meanwhile (exit code 4)."""
    app = live_app(ui_overrides(epochs=40))
    async with app.run_test(size=(120, 36)) as pilot:
        first = app.host
        assert first is not None
        await wait_for(pilot, lambda: latest_step_of(app) >= 2, what="step 2")
        held: list[RunHost] = []
        first.on_end = held.append  # the engine's "ended" waits here: the window, held open
        app.switch_to("fashion-mini")
        await wait_for(pilot, lambda: held and not first.alive, what="the first run's end")
        await pilot.press("q")
        assert app.is_running and isinstance(app.screen, QuitScreen)
        app.post_message(RunEnded(held[0]))  # what the engine thread posts: the switch goes on
        await wait_for(pilot, lambda: app.host is not first, what="the next preset's run")
        second = app.host
        assert second is not None and isinstance(app.screen, QuitScreen)
        await pilot.press("q")  # stop, in the question
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == EXIT_STOPPED
    assert second.join(10)
    assert second.result is not None and second.result.status == "stopped"


async def test_detach_leaves_the_run_training(
    ui_overrides: Callable[..., list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """d: the app closes, the engine goes on, and the run ends on its own with line logs."""
    app = live_app(ui_overrides("train.pace_s=0.3", epochs=3))
    async with app.run_test(size=(120, 36)) as pilot:
        host = app.host
        assert host is not None
        await wait_for(pilot, lambda: latest_step_of(app) >= 2, what="step 2")
        await pilot.press("q", "d")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.detached and host.alive and not host.control.stop_requested
    seen_hangup: list[object] = []
    join = host.join

    def watching_join(timeout: float | None = None) -> bool:
        seen_hangup.append(signal.getsignal(signal.SIGHUP))
        return join(timeout)

    host.join = watching_join  # type: ignore[method-assign]
    before = signal.getsignal(signal.SIGHUP)
    code = app_module.carry_on_detached(host)
    assert seen_hangup and seen_hangup[0] == signal.SIG_IGN, "a hangup leaves it training"
    assert signal.getsignal(signal.SIGHUP) == before
    assert code == 0 and not host.alive
    assert records(host.run_dir)[-1]["status"] == "completed"
    out = capsys.readouterr()
    said = out.out + out.err
    assert f"tuitrain watch {host.run_dir}" in said
    assert re.search(r"step +24/24", out.out), out.out  # headless lines, the header's total
