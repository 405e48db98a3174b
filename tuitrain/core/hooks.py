"""The one runner of alert hooks (`alerts.on_alert` in a preset, `tuitrain run --on-alert`).

The command runs through the shell in a session of its own, the alert record as one JSON line
on its stdin, its stdout discarded and its stderr kept for the reason of a failure. A hook
still running after its time limit is killed with everything it started (SIGKILL to its
process group: a background `sleep &` or a child that ignores SIGTERM goes too). No torch, no
Textual: the engine and `tuitrain run` both call it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable

HOOK_OUTPUT_CHARS = 200  # of a failed hook's last stderr line, in the reason given


def run_hook(
    command: str, payload: str, timeout_s: float,
    started: Callable[[subprocess.Popen[str]], None] | None = None,
) -> str:  # fmt: skip
    """Run `command` with `payload` (one line) on its stdin; "" when it exited 0 within
    `timeout_s`, else why not in a few words: "exit code 3 <its last stderr line>", "still
    running after 10 s: killed, with everything it started", or the OS's reason. `started`
    is given the process once it runs (a caller that may have to end it sooner)."""
    try:
        proc = subprocess.Popen(
            command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if started is not None:
        started(proc)
    try:
        _, err = proc.communicate(payload.rstrip("\n") + "\n", timeout=timeout_s)
    except BaseException as exc:  # the timeout, an interrupt: end its whole session
        kill_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            return f"still running after {timeout_s:g} s: killed, with everything it started"
        if isinstance(exc, OSError):
            return exc.strerror or type(exc).__name__
        raise
    if proc.returncode != 0:
        tail = (err or "").strip().splitlines()[-1:] or [""]
        return f"exit code {proc.returncode} {tail[0][:HOOK_OUTPUT_CHARS]}".rstrip()
    return ""


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the hook's process group (its session), then reap it; its pipes are closed
    without waiting for a grandchild that left the session and still holds them."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdin, proc.stderr):
        with contextlib.suppress(OSError, ValueError):
            if stream is not None:
                stream.close()
