"""`tuitrain run`'s dashboard over a real child script: its metrics and output live, `q`
stops the script (SIGINT) and the run keeps an end record."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.ui.pilot_tools import wait_for
from tuitrain.client.parent import Script
from tuitrain.ui.script_app import ScriptApp

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "client" / "scripts"
pytestmark = pytest.mark.timeout(120)


async def test_q_stops_a_live_script_and_the_run_has_an_end_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    script = Script([sys.executable, str(SCRIPTS / "forever.py")], tmp_path / "run", 5.0)
    app = ScriptApp(script)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.store.snapshot().get("loss")) >= 10, 60, "steps")
        await wait_for(pilot, lambda: len(app.output_log.lines) >= 1, 10, "the output pane")
        assert any("step 10" in strip.text for strip in app.output_log.lines)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 30, "the exit after the script")
    assert script.proc.poll() is not None
    code = script.finish()
    assert code == 0 and app.return_value == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    end = json.loads(lines[-1])
    assert end["type"] == "end" and end["status"] == "completed"  # the script's finish()
    assert "interrupted at step" in (tmp_path / "run" / "output.log").read_text()
    assert os.environ["PYTHONPATH"] == str(ROOT)


async def test_an_ended_script_is_viewed_with_the_badge_and_q_closes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the script has ended the view is a viewer: the VIEWING badge shows and `q`
    closes it without a question (there is nothing left to stop)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    script = Script(
        [sys.executable, str(SCRIPTS / "kfold.py"), "--folds", "1"], tmp_path / "run", 5.0
    )
    app = ScriptApp(script)
    async with app.run_test(size=(100, 30)) as pilot:
        assert not app.viewing  # a live script is hosted, not viewed
        await wait_for(pilot, lambda: app.ended, 60, "the script's end")
        await wait_for(pilot, lambda: app.badge.display, 10, "the VIEWING badge")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 30, "q closing the view")
    assert script.finish() == 0
