"""The precision advice (issue 16) in the GradScaler panel."""

from __future__ import annotations


async def test_the_gradscaler_panel_shows_the_advice() -> None:
    from textual.widgets import Static

    from tests.ui.fake_records import filled_store
    from tests.ui.pilot_tools import text_of
    from tuitrain.metrics.records import event_record
    from tuitrain.ui.app import TuitrainApp

    store = filled_store()
    store.push(
        event_record(
            "fp16 skipped 4 of 400 steps (1.0%) on a device with native bf16: --precision "
            "bf16 needs no loss scale and skips no step",
            kind="advice",
        )
    )
    app = TuitrainApp(store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        text = text_of(app.query_one("#scaler").query_one(".summary", Static))
    assert "advice: fp16 skipped 4 of 400 steps" in text and "scale 2^" in text
