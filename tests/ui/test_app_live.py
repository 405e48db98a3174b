"""Pilot tests against real tiny runs: panels fill, each key does what it says, no leaks."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from textual.widgets import OptionList, Static

from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.engine.precision import make_precision
from tuitrain.host.run import RunHost
from tuitrain.host.signals import SIGNAL_NAMES
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TEXT_INTERVAL_S, TuitrainApp
from tuitrain.ui.screens.help import HelpScreen
from tuitrain.ui.screens.presets import PresetScreen
from tuitrain.ui.screens.quit import QuitScreen
from tuitrain.ui.widgets.banner import Banner
from tuitrain.ui.widgets.status import StatusBar

pytestmark = pytest.mark.timeout(120)


def make_app(overrides: list[str], preset: str = "fashion-mini") -> TuitrainApp:
    cfg = load_preset(preset, overrides)
    return TuitrainApp(host=RunHost(cfg, MetricStore()), overrides=overrides)


def latest_step(app: TuitrainApp) -> int:
    return int((app.store.snapshot().latest or {}).get("step") or 0)


def summary(app: TuitrainApp, panel_id: str) -> str:
    return text_of(app.query_one(f"#{panel_id}").query_one(".summary", Static))


def end_record(run_dir: Path) -> dict:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


@pytest.mark.slow
async def test_panels_show_values(ui_overrides: Callable[..., list[str]]) -> None:
    app = make_app(ui_overrides(epochs=2))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.store.snapshot().last_eval is not None, what="an eval")
        await wait_for(pilot, lambda: app.host is not None and not app.host.alive, what="the end")
        await pilot.pause(TEXT_INTERVAL_S + 0.1)  # one more text tick
        status = text_of(app.query_one(StatusBar))
        assert "fashion-mini" in status and "step 16/16" in status
        assert "COMPLETED" in status
        assert "train 0." in summary(app, "loss") or "train 1." in summary(app, "loss")
        assert "acc " in summary(app, "loss")
        assert "/s" in summary(app, "throughput") and "step " in summary(app, "throughput")
        assert "host RSS" in summary(app, "memory") and "CPU run" in summary(app, "memory")
        # auto: bf16 on a CPU with AVX512-BF16/AMX, fp32 on one without (tested both ways
        # in tests/engine/test_trainer.py); the panel names what the run actually used
        precision = make_precision("auto", torch.device("cpu")).name
        assert (app.store.snapshot().header or {}).get("precision") == precision
        assert f"no GradScaler with {precision}" in summary(app, "metrics")  # in its place
        wait = summary(app, "datawait")  # the verdict depends on the machine's load
        assert "%" in wait and any(v in wait for v in ("· ok", "· warning", "· input-bound"))
        assert "fashion_cnn" in summary(app, "overview")
        assert app.event_log.lines, "the event log shows the run"
        await pilot.press("q")  # the run is over: q exits at once
    assert app.return_value == 0


def footer_says(app: TuitrainApp, label: str) -> bool:
    """Whether the footer offers space as `label` (Pause while running, Resume while paused)."""
    return any(
        active.binding.description == label
        for key, active in app.active_bindings.items()
        if key == "space" and active.enabled and active.binding.show
    )


@pytest.mark.slow
async def test_space_pauses_and_resumes(ui_overrides: Callable[..., list[str]]) -> None:
    app = make_app(ui_overrides(epochs=40))
    async with app.run_test(size=(120, 36)) as pilot:
        assert app.host is not None
        control = app.host.control
        await wait_for(pilot, lambda: latest_step(app) >= 4, what="step 4")
        await pilot.press("space")
        await wait_for(pilot, lambda: control.state == "paused", what="the pause")
        paused_at = latest_step(app)
        await pilot.pause(1.2)
        assert latest_step(app) == paused_at, "the step counter advanced while paused"
        assert "PAUSED" in text_of(app.query_one(StatusBar))
        await wait_for(pilot, lambda: footer_says(app, "Resume"), what="space's label: Resume")
        assert not footer_says(app, "Pause")
        await pilot.press("space")
        await wait_for(pilot, lambda: footer_says(app, "Pause"), what="space's label: Pause")
        await wait_for(pilot, lambda: latest_step(app) > paused_at + 2, what="steps after resume")
        await pilot.press("q", "q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.host is not None and app.host.join(10)


async def test_quit_ends_the_engine_thread(ui_overrides: Callable[..., list[str]]) -> None:
    """q asks first (the run goes on meanwhile); q again stops and saves: exit code 4."""
    app = make_app(ui_overrides(epochs=40))
    async with app.run_test(size=(120, 36)) as pilot:
        host = app.host
        assert host is not None
        await wait_for(pilot, lambda: latest_step(app) >= 2, what="step 2")
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen) and host.alive
        assert not host.control.stop_requested, "the question stops nothing by itself"
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit after the engine ended")
    assert not host.thread.is_alive() or host.join(2)
    assert app.return_value == EXIT_STOPPED == 4
    end = end_record(host.run_dir)
    assert end["type"] == "end" and end["status"] == "stopped"
    assert end["reason"] == "quit from the UI"


async def test_second_q_forces_exit(ui_overrides: Callable[..., list[str]]) -> None:
    app = make_app(ui_overrides("train.pace_s=1.5", epochs=40))
    async with app.run_test(size=(120, 36)) as pilot:
        host = app.host
        assert host is not None
        await wait_for(pilot, lambda: host.control.state == "running", what="the first step")
        await pilot.press("q", "q")
        banner = app.query_one(Banner)
        assert banner.display and "stopping" in text_of(banner) and "q again" in text_of(banner)
        started = time.monotonic()
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, timeout=5, what="the forced exit")
        assert time.monotonic() - started < 5
    assert host.join(10), "the engine thread ends after a forced quit"


@pytest.mark.slow
async def test_preset_switch_restarts(
    ui_overrides: Callable[..., list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    presets = tmp_path / "config" / "tuitrain" / "presets"
    presets.mkdir(parents=True)
    (presets / "tiny-fp32.toml").write_text(
        '[preset]\ndescription = "tiny fp32 user preset for the switch test"\n'
        '[data]\nname = "fashion_mini"\n[train]\nprecision = "fp32"\ncompile = "off"\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app = make_app(ui_overrides(epochs=40))
    async with app.run_test(size=(120, 36)) as pilot:
        first = app.host
        assert first is not None
        await wait_for(pilot, lambda: latest_step(app) >= 4, what="step 4")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PresetScreen), what="the picker")
        option_list = app.screen.query_one(OptionList)
        names = [option_list.get_option_at_index(i).id for i in range(option_list.option_count)]
        assert "tiny-fp32" in names and "fashion-mini" in names
        option_list.highlighted = names.index("tiny-fp32")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.host is not first, what="the new run")
        assert not first.alive
        await wait_for(
            pilot,
            lambda: (app.store.snapshot().header or {}).get("preset") == "tiny-fp32",
            what="the new header",
        )
        snap = app.store.snapshot()
        assert snap.header["precision"] == "fp32"
        assert not snap.evals and latest_step(app) <= 4, "the store was reset"
        assert any(e.get("kind") == "preset_switch" for e in snap.events)
        second_dir = app.host.run_dir
        assert second_dir is not None and second_dir != first.run_dir and second_dir.is_dir()
        assert (second_dir / "config.toml").is_file()
        await wait_for(pilot, lambda: "tiny-fp32" in text_of(app.query_one(StatusBar)))
        await wait_for(pilot, lambda: "no GradScaler with fp32" in summary(app, "metrics"))
        await pilot.press("q", "q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert end_record(first.run_dir)["status"] == "stopped"
    assert "switch" in end_record(first.run_dir)["reason"]


async def test_engine_failure_is_shown(ui_overrides: Callable[..., list[str]]) -> None:
    app = make_app(ui_overrides('model.name="tests.ui.failing:make_model"'))
    async with app.run_test(size=(120, 36)) as pilot:
        banner = app.query_one(Banner)
        await wait_for(pilot, lambda: banner.display, what="the failure banner")
        text = text_of(banner)
        # a factory that raises is the user's input (one sentence, exit 2), not our bug
        assert "run failed" in text and "the test model refuses to build" in text
        assert "make_model(num_classes=10) raised RuntimeError" in text
        assert "FAILED" in text_of(app.query_one(StatusBar))
        await pilot.press("question_mark")  # the app is alive and answers keys
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == 2
    host = app.host
    assert host is not None and host.run_dir is not None
    assert "the test model refuses to build" in (host.run_dir / "train.log").read_text()


async def test_sigterm_stops_the_run_cleanly(ui_overrides: Callable[..., list[str]]) -> None:
    """A scheduler's SIGTERM (or SIGHUP when SSH drops) stops at a step boundary, like q."""
    app = make_app(ui_overrides(epochs=40))
    async with app.run_test(size=(120, 36)) as pilot:
        host = app.host
        assert host is not None
        await wait_for(pilot, lambda: latest_step(app) >= 2, what="step 2")
        app.on_stop_signal(*SIGNAL_NAMES[signal.SIGTERM])  # what the loop's handler calls
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == 143
    assert host.join(5)
    assert end_record(host.run_dir)["reason"] == "stopped by SIGTERM"


async def test_after_a_failure_another_preset_starts(
    ui_overrides: Callable[..., list[str]],
) -> None:
    overrides = ui_overrides(epochs=40)  # the second run still trains when q is pressed
    failing = load_preset("fashion-mini", [*overrides, 'model.name="tests.ui.failing:make_model"'])
    app = TuitrainApp(host=RunHost(failing, MetricStore()), overrides=overrides)
    async with app.run_test(size=(120, 36)) as pilot:
        first = app.host
        banner = app.query_one(Banner)
        await wait_for(pilot, lambda: banner.display, what="the failure banner")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PresetScreen), what="the picker")
        await pilot.press("enter")  # the current preset is highlighted: run it again, fixed
        await wait_for(pilot, lambda: app.host is not first, what="the new run")
        await wait_for(pilot, lambda: latest_step(app) >= 2, what="the new run training")
        assert not banner.display, "the failure banner is gone with the failed run"
        await pilot.press("q", "q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == EXIT_STOPPED
