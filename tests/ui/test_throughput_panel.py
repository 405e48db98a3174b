"""The Throughput panel shows achieved TFLOP/s, MFU and what the monitor costs (issue #15)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.ui.fake_records import filled_store
from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.view import ThreadCpuShare
from tuitrain.ui.widgets.throughput import ThroughputPanel, monitor_text

pytestmark = pytest.mark.timeout(120)


async def panel_text(precision: str, device: str, size: tuple[int, int]) -> str:
    app = TuitrainApp(store=filled_store(precision, device))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.poll_all()
        await pilot.pause()
        return text_of(app.query_one(ThroughputPanel).summary_text)


async def test_the_panel_shows_tflops_mfu_and_the_monitor_cost() -> None:
    wide = await panel_text("bf16", "cuda", (120, 36))
    # fake records: 27.4 MFLOP per sample at ~38k samples/s on an H200 (989 bf16 TFLOP/s)
    assert "1.04 TFLOP/s · MFU 0.1%" in wide
    assert "monitor 0.80% · 0.5 syncs/step" in wide
    assert "UI" not in wide  # watching records: no live UI thread share to show


async def test_a_cpu_run_says_no_mfu_and_a_small_terminal_keeps_the_flops() -> None:
    small = await panel_text("bf16", "cpu", (80, 24))
    assert "TFLOP/s · MFU —" in small.replace("\n", " ")


def test_the_ui_thread_share_is_measured_over_a_window() -> None:
    share = ThreadCpuShare(window_s=0.0)
    share.sample()
    assert share.share() is None  # one sample: no window yet
    end = time.thread_time() + 0.02
    while time.thread_time() < end:  # the thread works: CPU time passes
        pass
    share.sample()
    measured = share.share()
    assert measured is not None and 0 < measured <= 1.5


def test_the_monitor_line_includes_the_ui_share_when_live() -> None:
    latest = {"monitor_frac": 0.0012, "syncs_per_step": 0.05}
    assert "monitor 0.12% · 0.05 syncs/step · UI 0.4% CPU" in monitor_text(latest, 0.004)
    assert monitor_text({}, None) == ""


@pytest.mark.slow
async def test_a_live_run_shows_its_flop_rate_and_the_ui_threads_share(
    ui_overrides: Callable[..., list[str]],
) -> None:
    """A real tiny run: TFLOP/s (no MFU on a CPU), the engine's cost and, once a window of
    the UI thread's CPU time has closed, its share, in the Throughput panel."""
    overrides = ui_overrides(epochs=40)
    app = TuitrainApp(host=RunHost(load_preset("fashion-mini", overrides), MetricStore()))
    text = ""

    def shown() -> bool:
        nonlocal text
        text = text_of(app.query_one(ThroughputPanel).summary_text)
        return "UI " in text and "TFLOP/s" in text

    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, shown, what="TFLOP/s and the UI share in the panel")
        assert "MFU —" in text and "monitor " in text and "syncs/step" in text
        await pilot.press("q", "q")  # q asks first over a live run; q again stops
        await wait_for(pilot, lambda: app.host is not None and not app.host.alive, what="stop")
