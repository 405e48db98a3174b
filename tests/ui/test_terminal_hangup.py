"""The terminal goes away (SSH dropped): the app stops the run and exits 129, never hangs.

Writing to a hung-up terminal fails with EIO. Textual's writer thread died of it, its queue
(30 writes) filled and the app's next write blocked for ever: the process hung after the run
had ended, or left with exit 1 from an EIO while restoring stderr.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.drivers._writer_thread import WriterThread

from tests.pty_tools import hang_up_after_first_record
from tests.ui.fake_records import filled_store
from tuitrain.core.errors import EXIT_SIGHUP
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.terminal import HangupSafeDriver, TerminalOutput

pytestmark = pytest.mark.timeout(120)


class HungUpTerminal:
    """A stream whose every write fails as a hung-up terminal's does."""

    def write(self, text: str) -> int:
        raise OSError(errno.EIO, "Input/output error")

    def flush(self) -> None:
        raise OSError(errno.EIO, "Input/output error")


def test_writer_over_a_hung_up_terminal_never_blocks() -> None:
    writer = WriterThread(TerminalOutput(HungUpTerminal()))  # type: ignore[arg-type]
    writer.start()
    for _ in range(200):  # well past the writer's queue of 30
        writer.write("frame")
    writer.stop()  # joins: returned, so the queue kept draining
    assert not writer.is_alive()


async def test_the_app_draws_through_the_hangup_safe_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)  # textual serve's driver would win
    app = TuitrainApp(store=filled_store())
    assert app.get_driver_class() is HangupSafeDriver


@pytest.mark.slow
def test_hangup_stops_the_run_and_exits_129(
    tmp_path: Path, ui_overrides: Callable[..., list[str]]
) -> None:
    """A real terminal (pty) that hangs up while the dashboard draws on it."""
    sets = [arg for o in ui_overrides(epochs=50) for arg in ("--set", o)]
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("TEXTUAL_DRIVER", None)
    metrics = tmp_path / "first-run" / "metrics.jsonl"
    code, end = hang_up_after_first_record(sets, env, metrics)
    assert code == EXIT_SIGHUP
    assert end["type"] == "end" and end["reason"] == "stopped by SIGHUP"
