"""A detached run outlives its terminal: it trains to its end, writes its end record, exits 0.

After `q` then `d` the dashboard is gone and the run goes on in the same process. Closing
the terminal then killed it with SIGABRT within a second: the hangup comes with a SIGCONT,
Textual's driver still held that signal, its handler raised in the main thread, and the
interpreter shut down under the engine thread (torch aborts a thread that loses the GIL to
the shutdown). No end record, the control dir left behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ui.fake_records import filled_store
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.terminal import HangupSafeDriver

pytestmark = pytest.mark.timeout(150)

# The child becomes a session leader (start_new_session) and takes the pty as its
# controlling terminal, as a login shell's job does: closing the master then hangs the
# terminal up for real (the kernel sends SIGHUP and SIGCONT, reads and writes fail).
CONTROLLING_TTY = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'tuitrain', *sys.argv[1:]])"
)


class Terminal:
    """The master side of a pty: what the app drew so far, and keys to press."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.seen = b""

    def read_until(self, done: Callable[[], bool], what: str, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert proc.poll() is None, f"tuitrain exited ({proc.returncode}) before {what}"
            assert time.monotonic() < deadline, f"no {what} within 60 s"
            if select.select([self.master], [], [], 0.1)[0]:
                self.seen += os.read(self.master, 65536)

    def press(self, key: bytes) -> int:
        """Press `key`; returns where the output after it starts."""
        os.write(self.master, key)
        return len(self.seen)


async def test_the_driver_hands_sigcont_and_sigtstp_back_when_closed() -> None:
    """Left with Textual's handler, the SIGCONT of a hangup restarted a dashboard that had
    ended (RuntimeError: no running event loop, raised in the main thread)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGCONT, signal.SIGTSTP)}
    driver = HangupSafeDriver(TuitrainApp(store=filled_store()))
    try:
        assert signal.getsignal(signal.SIGCONT) == driver._sigcont_application  # Textual's
    finally:
        driver.close()
    assert {s: signal.getsignal(s) for s in before} == before


def records(metrics: Path) -> list[dict]:
    text = metrics.read_text() if metrics.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def detached_in_pty(
    metrics: Path, sets: list[str], columns: int, lines: int
) -> tuple[subprocess.Popen, Terminal, int]:
    """`python -m tuitrain` on a pty it takes as its controlling terminal, paused after its
    first train record (so the run cannot end before the detach), then `q` and `d`: (the
    process, the terminal, where the output after `d` starts). The caller closes the master
    and ends the process; on a failure here both are done before the error goes up."""
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(lines)}
    env.pop("TEXTUAL_DRIVER", None)
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", CONTROLLING_TTY, *sets],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    term = Terminal(master)
    try:
        term.read_until(lambda: any(r["type"] == "train" for r in records(metrics)), "train", proc)
        term.press(b" ")
        paused = lambda: any(r.get("kind") == "pause" for r in records(metrics))  # noqa: E731
        term.read_until(paused, "pause event", proc)
        asked = term.press(b"q")
        term.read_until(lambda: b"detach" in term.seen[asked:], "quit question", proc)
        return proc, term, term.press(b"d")  # d resumes the run
    except BaseException:
        os.close(master)
        proc.kill()
        proc.wait()
        raise


@pytest.mark.slow
def test_detached_run_trains_to_its_end_after_the_terminal_closed(
    tmp_path: Path, ui_overrides: Callable[..., list[str]]
) -> None:
    run_dir = tmp_path / "first-run"
    metrics, train_log = run_dir / "metrics.jsonl", run_dir / "train.log"
    sets = [arg for o in ui_overrides(epochs=2) for arg in ("--set", o)]  # 16 steps
    proc, term, detached = detached_in_pty(metrics, sets, columns=100, lines=30)
    master = term.master
    try:
        gone = lambda: b"dashboard closed" in term.seen[detached:]  # noqa: E731
        term.read_until(gone, "detach", proc)
        os.close(master)  # the terminal window closes
        master = -1
        before = train_log.stat().st_size
        proc.send_signal(signal.SIGHUP)  # and the shell passes the hangup on, as bash does
        proc.send_signal(signal.SIGCONT)
        code = proc.wait(timeout=90)
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, f"exit {code} (-6: SIGABRT; 1: an exception in the main thread)"
    end = records(metrics)[-1]
    assert end["type"] == "end" and end["status"] == "completed", end
    with train_log.open("rb") as log:
        log.seek(before)
        after = log.read().decode()
    assert " step    16/16 " in after and " end   completed " in after, after
    assert f"tuitrain: run dir {run_dir}" in after  # stderr, once the terminal was gone
