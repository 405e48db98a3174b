"""A real terminal (pty) that hangs up under a running `python -m tuitrain`."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def hang_up_after_first_record(
    args: Sequence[str], env: Mapping[str, str], metrics: Path
) -> tuple[int, dict]:
    """Run tuitrain on a pty until its first train record; then the terminal goes away (the
    master closes, so writes fail with EIO), a second of output goes into it, and SIGHUP and
    SIGCONT arrive as a login shell sends them. Returns (exit code, last record)."""
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", *args],
        stdin=slave, stdout=slave, stderr=slave, env=dict(env), start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        while '"type": "train"' not in (metrics.read_text() if metrics.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never logged"
            try:
                os.read(master, 65536)  # keep the terminal drained while it is up
            except BlockingIOError:
                time.sleep(0.1)
        os.close(master)
        time.sleep(1.0)
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGCONT)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, json.loads(metrics.read_text().splitlines()[-1])
