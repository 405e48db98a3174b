"""`tuitrain run`'s Output pane under a flood: a bounded queue, counted skips, lines cut
before they reach Textual, and the keys still work (Pilot, over a real tiny child)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.ui.pilot_tools import wait_for
from tuitrain.client.parent import LINE_CAP, Script
from tuitrain.ui.script_app import MAX_OUTPUT_LINES, QUEUE_MAX, ScriptApp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FLOOD = 50_000
CHILD = f"""
import sys, time
out = sys.stdout.buffer
out.write(b"".join(b"line %d\\n" % i for i in range({FLOOD})))
out.write(b"L" * 1_000_000 + b"\\n")  # one long line
out.write(b"last line\\n")
out.flush()
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    sys.exit(0)
"""


def pane_text(app: ScriptApp) -> str:
    return "".join(strip.text for strip in app.output_log.lines)


def test_a_flood_of_output_keeps_the_pane_current_and_bounded(tmp_path: Path) -> None:
    asyncio.run(flood(tmp_path))


async def flood(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    script = Script([sys.executable, "-c", CHILD], run_dir, 5.0)
    app = ScriptApp(script)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "last line" in pane_text(app), 60, "the newest line")
        # every line of the script was either written to the pane or counted as skipped
        assert app.lines_shown + app.lines_skipped == FLOOD + 2
        assert app.lines.most <= QUEUE_MAX
        assert len(app.output_log.lines) <= MAX_OUTPUT_LINES
        text = pane_text(app)
        assert f"… [cut: {1_000_000 - LINE_CAP} bytes]" in text  # cut before Textual saw it
        if app.lines_skipped:
            assert "lines skipped; output.log has them]" in text
        await pilot.press("q")  # the keys still work: SIGINT to the script
        await wait_for(pilot, lambda: not app.is_running, 60, "the exit after the script")
    assert script.finish() == 0
    log = (run_dir / "output.log").read_bytes()
    assert log.count(b"\n") == FLOOD + 2 and b"L" * 1_000_000 in log  # everything kept
    end = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert end["type"] == "end" and end["exit_code"] == 0
