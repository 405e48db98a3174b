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


async def test_the_banner_shows_the_newest_alert() -> None:
    from tests.ui.fake_records import filled_store
    from tests.ui.pilot_tools import text_of
    from tuitrain.metrics.records import event_record
    from tuitrain.ui.app import TuitrainApp
    from tuitrain.ui.widgets.banner import Banner

    store = filled_store()
    app = TuitrainApp(store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        assert not app.query_one(Banner).display  # no alert yet
        store.push(
            event_record(
                "alert loss_spike: loss spike: 9.1 is 4.2x the median of the last 20 log points",
                level="warning",
                kind="alert",
                alert="loss_spike",
                action="pause",
                step=120,
            )  # fmt: skip
        )
        app.poll_all()
        await pilot.pause()
        banner = app.query_one(Banner)
        assert banner.display
        text = text_of(banner)
    assert text.startswith("⚠ alert loss_spike at step 120: loss spike: 9.1 is 4.2x")
    assert text.endswith("· action: pause")
