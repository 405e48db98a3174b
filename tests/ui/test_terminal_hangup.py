"""The terminal goes away (SSH dropped): the app stops the run and exits 129, never hangs.

Writing to a hung-up terminal fails with EIO. Textual's writer thread died of it, its queue
(30 writes) filled and the app's next write blocked for ever: the process hung after the run
had ended, or left with exit 1 from an EIO while restoring stderr.
"""

from __future__ import annotations

import errno
import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.drivers._writer_thread import WriterThread

from tests.ui.fake_records import filled_store
from tuitrain.errors import EXIT_SIGHUP
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


async def test_the_app_draws_through_the_hangup_safe_driver() -> None:
    app = TuitrainApp(store=filled_store())
    if os.environ.get("TEXTUAL_DRIVER"):
        pytest.skip("TEXTUAL_DRIVER picks the driver")
    assert app.get_driver_class() is HangupSafeDriver


def test_hangup_stops_the_run_and_exits_129(
    tmp_path: Path, ui_overrides: Callable[..., list[str]]
) -> None:
    """A real terminal (pty) that hangs up: the master closes, then SIGHUP and SIGCONT
    arrive as a login shell sends them."""
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    run_dir = tmp_path / "first-run"
    sets = [arg for o in ui_overrides(epochs=50) for arg in ("--set", o)]
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("TEXTUAL_DRIVER", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", *sets],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    metrics = run_dir / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 60
        while '"type": "train"' not in (metrics.read_text() if metrics.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never logged"
            try:
                os.read(master, 65536)  # keep the terminal drained while it is up
            except BlockingIOError:
                time.sleep(0.1)
        os.close(master)  # the terminal goes away: writes to it fail with EIO from now on
        time.sleep(1.0)  # a second of frames into the dead terminal
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGCONT)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == EXIT_SIGHUP
    end = json.loads(metrics.read_text().splitlines()[-1])
    assert end["type"] == "end" and end["reason"] == "stopped by SIGHUP"
