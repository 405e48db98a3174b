"""`tuitrain run` started in the background (`&`, nohup) inherits SIGINT/SIGQUIT/SIGHUP
ignored; the script it starts gets them back at their defaults, so Ctrl-C, `q` and a stop
alert reach it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

REPORT = """
import json, signal
names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGPIPE")
def said(h):
    return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignored",
            signal.default_int_handler: "keyboard-interrupt"}.get(h, "handler")
print("SIGNALS " + json.dumps({n: said(signal.getsignal(getattr(signal, n))) for n in names}))
"""


def ignoring() -> None:
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)  # what `&` and nohup hand down


@pytest.mark.slow
def test_a_background_tuitrain_run_gives_the_script_default_signals(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(tmp_path / "r"), "--no-ui",
         "--", sys.executable, "-c", REPORT],
        capture_output=True, text=True, timeout=60, preexec_fn=ignoring,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("SIGNALS "))
    seen = json.loads(line.removeprefix("SIGNALS "))
    # Python installs its KeyboardInterrupt handler only where SIGINT was not ignored
    assert seen == {"SIGINT": "keyboard-interrupt", "SIGTERM": "default", "SIGHUP": "default",
                    "SIGQUIT": "default", "SIGPIPE": "ignored"}  # fmt: skip
