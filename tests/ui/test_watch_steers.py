"""`tuitrain watch` over a run that tuitrain hosts: its steering keys act through the control
channel (pause, resume, checkpoint, stop asked first), and only while the run listens."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ui.fake_records import filled_store
from tests.ui.pilot_tools import record_notifications, text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.quit import QuitScreen
from tuitrain.ui.widgets.status import StatusBar

pytestmark = pytest.mark.timeout(180)


def shown_actions(app: TuitrainApp) -> set[str]:
    return {b.action for _, b, enabled, _ in app.screen.active_bindings.values() if enabled}


def kinds(run_dir: Path) -> list[str]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [str(json.loads(line).get("kind")) for line in lines]


async def test_a_viewer_steers_a_hosted_run(ui_overrides: Callable[..., list[str]]) -> None:
    overrides = ui_overrides("train.pace_s=0.3", epochs=40)
    host = RunHost(load_preset("fashion-mini", overrides), steerable=True)
    host.start()
    follower = None
    try:
        given = next(o for o in overrides if o.startswith("run.run_dir="))
        run_dir = Path(given.split("=", 1)[1].strip('"'))
        store = MetricStore()
        follower = JsonlFollower(run_dir / "metrics.jsonl", store, poll_s=0.1)
        follower.start()
        app = TuitrainApp(store=store)
        app.watched_path = run_dir / "metrics.jsonl"
        said = record_notifications(app)
        async with app.run_test(size=(120, 36)) as pilot:
            steering = app.steering
            assert steering is not None
            await wait_for(pilot, lambda: steering.ready, 60, "the run's channel")
            await pilot.pause()
            assert {"toggle_pause", "checkpoint", "profile", "stop_run"} <= shown_actions(app)
            assert "pick_preset" not in shown_actions(app)
            assert "steers" in text_of(app.badge)
            await pilot.press("space")
            await wait_for(pilot, lambda: host.control.state == "paused", 30, "the pause")
            status = app.query_one(StatusBar)
            await wait_for(pilot, lambda: "PAUSED" in text_of(status), 10, "PAUSED shown")
            await wait_for(pilot, lambda: any("pause requested" in m for m in said), 10)
            await pilot.press("space")
            await wait_for(pilot, lambda: host.control.state == "running", 30, "the resume")
            await pilot.press("s")
            await wait_for(pilot, lambda: any("checkpoint saved" in m for m in said), 30)
            await pilot.press("x")
            assert isinstance(app.screen, QuitScreen)
            assert "detach" not in text_of(app.screen.query_one("#quit-text"))
            await pilot.press("escape")  # cancelled: nothing sent
            assert not host.control.stop_requested
            await pilot.press("x", "enter")
            assert host.join(60), "the stop reached the run"
            await wait_for(pilot, lambda: store.snapshot().end is not None, 10, "the end")
            await wait_for(pilot, lambda: not steering.ready, 5, "the channel gone")
            await pilot.pause()
            assert "stop_run" not in shown_actions(app) and "toggle_pause" not in shown_actions(app)
            assert text_of(app.badge) == "VIEWING"
            await pilot.press("q")  # a viewer: closes at once
        assert app.return_value == 0
    finally:
        if follower is not None:
            follower.stop()
        host.request_stop("test over")
        host.join(30)
    assert host.result.status == "stopped" and host.result.exit_code == EXIT_STOPPED
    assert "pause" in kinds(run_dir) and "resume" in kinds(run_dir)
    assert kinds(run_dir).count("control") >= 4


async def test_escape_goes_back_only_when_opened_from_the_runs_table() -> None:
    app = TuitrainApp(store=filled_store())
    async with app.run_test(size=(120, 36)) as pilot:
        assert "back_to_runs" not in shown_actions(app)
        await pilot.press("escape")
        assert app.is_running
    back = TuitrainApp(store=filled_store())
    back.back_to = "runs"
    async with back.run_test(size=(120, 36)) as pilot:
        assert "back_to_runs" in shown_actions(back)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not back.is_running, 5, "back to the table")
    assert back.return_value == 0
