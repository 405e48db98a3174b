"""Snapshot tests of the main screen with deterministic records (pytest-textual-snapshot).

Update the SVGs with `pytest tests/ui/test_snapshots.py --snapshot-update` and look at them.
"""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from tests.ui.fake_records import filled_store
from tuitrain.metrics.records import event_record
from tuitrain.metrics.sinks import TimelineStoreSink
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.system import HostSampler

NO_PROC = Path(__file__).parent / "no-such-root"  # no proc/ under it: the host's figures unknown


async def settle(pilot: Pilot) -> None:
    """Draw everything once (the timers would, a few ticks later)."""
    await pilot.pause()
    app = pilot.app
    assert isinstance(app, TuitrainApp)
    app.host_sampler = HostSampler(NO_PROC)  # the host line: "—" for all, as on another OS
    # The charts and sparklines are drawn to their panel's size: poll once the layout has
    # given every panel one (on a loaded machine the first poll can come before it)
    for _ in range(200):
        if all(panel.content_size.width > 0 for panel in app.panels if panel.display):
            break
        await pilot.pause(0.01)
    app.poll_all()
    await pilot.pause()
    app.poll_all()  # a chart laid out by the first poll's text is drawn to its size now
    await pilot.pause()
    # The log scrolls to its end after a layout; make that happen before the screenshot.
    app.event_log.scroll_end(animate=False, immediate=True)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


def failed_store() -> MetricStore:
    store = filled_store("bf16", "cpu", steps=60)
    sink = TimelineStoreSink(store)
    sink.write(
        event_record(
            "the loss is nan at step 61; stopped before the optimizer step "
            "(lower optim.lr, set optim.grad_clip (e.g. 1.0), or use --precision bf16/fp32)",
            level="error",
            kind="failed",
            hint="lower optim.lr, set optim.grad_clip (e.g. 1.0), or use --precision bf16/fp32",
            traceback="Traceback (most recent call last):\n  ...\nTrainingError: the loss is nan",
        )
    )
    sink.write({"type": "end", "status": "failed", "reason": "the loss is nan", "step": 60})
    return store


def test_main_screen_fp16_cuda_120x36(snap_compare) -> None:  # noqa: ANN001 - fixture
    app = TuitrainApp(store=filled_store("fp16", "cuda"))
    assert snap_compare(app, terminal_size=(120, 36), run_before=settle)


def test_main_screen_bf16_cpu_80x24(snap_compare) -> None:  # noqa: ANN001 - fixture
    app = TuitrainApp(store=filled_store("bf16", "cpu"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


def test_failed_run_160x48(snap_compare) -> None:  # noqa: ANN001 - fixture
    app = TuitrainApp(store=failed_store())
    assert snap_compare(app, terminal_size=(160, 48), run_before=settle)


def test_help_screen_120x36(snap_compare) -> None:  # noqa: ANN001 - fixture
    app = TuitrainApp(store=filled_store())
    assert snap_compare(app, terminal_size=(120, 36), press=["question_mark"], run_before=settle)


def test_script_run_100x30(snap_compare) -> None:  # noqa: ANN001 - fixture
    """A script's run: Config, Summary and its own metrics; steps/s; no engine panels."""
    from tests.ui.fake_records import script_records, store_of

    app = TuitrainApp(store=store_of(script_records()))
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle)


def test_charlm_run_80x24(snap_compare) -> None:  # noqa: ANN001 - fixture
    """A language model's run: tokens/s, the val loss in nats/char, the sample's lines."""
    from tests.ui.fake_records import charlm_records, store_of

    app = TuitrainApp(store=store_of(charlm_records()))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)
