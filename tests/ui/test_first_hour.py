"""Issue #48, a newcomer's first hour: what the help, the footer, the filters and the event
log say match what the screen shows."""

from __future__ import annotations

import pytest

from tests.ui.fake_records import filled_store, script_records, store_of
from tests.ui.pilot_tools import text_of
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.help import HelpScreen

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
