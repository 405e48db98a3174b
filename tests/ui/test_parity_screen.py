"""Pilot tests of the parity screen: real (tiny) parity checks, a verdict, cancel, no leaks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ui.pilot_tools import record_notifications, text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.host.run import RunHost
from tuitrain.metrics.parity_report import EpochRow, PairedCounts, ParityResult
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.parity import THREAD_NAME, ParityScreen

pytestmark = pytest.mark.timeout(120)

TINY_PARITY = ["data.train_samples=512", "data.val_samples=256", "optim.lr=3e-4", "train.seed=4"]


def parity_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def verdict(screen: ParityScreen) -> str:
    return text_of(screen.query_one("#parity-verdict"))


def has_verdict(screen: ParityScreen) -> bool:
    return verdict(screen).startswith(("PASS", "FAIL", "ERROR"))


def latest_step(app: TuitrainApp) -> int:
    return int((app.store.snapshot().latest or {}).get("step") or 0)


@pytest.mark.slow
async def test_pushed_screen_shows_table_and_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_preset("fashion-mini", TINY_PARITY)
    monkeypatch.setattr(TuitrainApp, "launch", lambda self, host: None)  # a dashboard, idle
    app = TuitrainApp(host=RunHost(cfg, MetricStore()))  # (a viewer does not offer p)
    messages = record_notifications(app)
    screen = ParityScreen(cfg, epochs=1, mixed="bf16", early_steps=2, run_dir=tmp_path / "p")
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(screen)
        await wait_for(pilot, lambda: has_verdict(screen), timeout=90, what="the verdict")
        await pilot.press("p")  # the preset picker cannot open over the check: say so
        assert isinstance(app.screen, ParityScreen)
        assert any("close the parity check first" in m for m in messages), messages
        await pilot.pause(0.6)  # a chart tick
        text = verdict(screen)
        assert text.startswith(("PASS", "FAIL")), text
        assert "test set 256 images: one image = 0.39 point" in text
        assert "speedup bf16/fp32 = " in text and "×" in text
        # the noise, from the two runs' last evaluations paired on the same 256 images
        assert screen.result is not None and screen.result.paired is not None
        only = screen.result.discordant
        assert only is not None and screen.result.paired.n == 256
        assert f"discordant images: {only['fp32_only']} only fp32 right" in text
        assert f"{only['mixed_only']} only bf16 right" in text
        assert "gap 95% CI [" in text and "McNemar p = " in text
        table = text_of(screen.query_one("#parity-table"))
        assert "bf16 acc" in table and table.count("%") == 2  # epoch 1: both accuracies
        progress = text_of(screen.query_one("#parity-progress"))
        assert "fp32  step 2/2 · done" in progress and "bf16  step 2/2 · done" in progress
        saved = json.loads((tmp_path / "p" / "parity.json").read_text())
        assert saved["verdict"] == text.split(":")[0]
        low, high = saved["gap_ci95_points"]
        assert low <= saved["gap_points"] <= high
        assert f"gap 95% CI [{low:+.2f}, {high:+.2f}] point" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, ParityScreen)
    assert not parity_threads()


@pytest.mark.slow
async def test_c_pauses_the_run_shows_a_verdict_and_resumes(
    ui_overrides: Callable[..., list[str]],
) -> None:
    # bf16 named, not auto: auto is fp32 on a CPU without native bf16, and the check then
    # has nothing to compare (tests/engine/test_parity.py covers that refusal)
    overrides = ui_overrides('train.precision="bf16"', epochs=40)
    host = RunHost(load_preset("fashion-mini", overrides), MetricStore())
    app = TuitrainApp(host=host, overrides=overrides)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: latest_step(app) >= 2, what="step 2")
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, ParityScreen)
        assert host.control.paused
        await wait_for(pilot, lambda: host.control.state == "paused", what="the pause")
        await pilot.press("space")  # would resume the run mid-check: refused while it is open
        assert host.control.paused and isinstance(app.screen, ParityScreen)
        await wait_for(pilot, lambda: has_verdict(screen), timeout=90, what="the verdict")
        assert verdict(screen).startswith(("PASS", "FAIL")), verdict(screen)
        note = text_of(screen.query_one("#parity-training"))
        assert "Training paused at step" in note and "resumes when you close" in note
        assert host.run_dir is not None and (host.run_dir / "parity" / "parity.json").exists()
        paused_at = latest_step(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, ParityScreen)
        assert not host.control.paused
        await wait_for(pilot, lambda: latest_step(app) > paused_at, what="steps after resume")
        await pilot.press("q", "q")  # q asks first over a live run; q again stops
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert host.join(10) and not parity_threads()


@pytest.mark.slow
async def test_escape_cancels_the_check() -> None:
    cfg = load_preset("fashion-mini", [*TINY_PARITY, "train.pace_s=0.3"])
    app = TuitrainApp(store=MetricStore())
    screen = ParityScreen(cfg, epochs=1, mixed="bf16", early_steps=0)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(screen)
        fp32 = screen.stores.fp32
        await wait_for(pilot, lambda: fp32.snapshot().latest is not None, what="a first step")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ParityScreen), what="closing")
        assert screen.result is not None and screen.result.verdict is None
        assert screen.result.status == "cancelled"
    assert not parity_threads()


def test_the_banner_says_when_the_verdict_and_the_noise_disagree() -> None:
    r = ParityResult(preset="p", mixed="bf16", device="cpu", epochs=1, seed=0)
    r.per_epoch = [EpochRow(1, 0.803, 0.800, 0.5, 0.5)]  # gap +0.3 on 1,000 images: PASS
    r.test_set_size, r.paired = 1000, PairedCounts(790, 13, 10, 187)  # 23 discordant
    screen = ParityScreen(None)
    screen.result = r
    text, kind = screen.verdict_text()
    assert kind == "pass" and text.startswith("PASS: gap +0.30 point")
    assert "discordant images: 13 only fp32 right, 10 only bf16 right" in text
    assert "McNemar p = 0.68" in text
    last = text.splitlines()[-1]
    assert last.startswith("PASS, but the 95% interval of the gap [")
    assert "reaches past 0.5 point" in last and "settle it with more epochs" in last
    # 10,000 images, 3 vs 0: the interval stays within 0.5 point, nothing to add
    r.per_epoch = [EpochRow(1, 0.8003, 0.8000, 0.5, 0.5)]
    r.test_set_size, r.paired = 10_000, PairedCounts(8000, 3, 0, 1997)
    text, _ = screen.verdict_text()
    assert "McNemar p = 0.25" in text and "but" not in text
    assert text.splitlines()[-1].startswith("gap 95% CI [-0.02, +0.08] point")
