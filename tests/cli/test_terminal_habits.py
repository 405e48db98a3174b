"""Terminal habits: --help documents every option and the environment, TERM=dumb falls back to
line logs (in a real terminal, tmux), and `watch` refuses to draw on it."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuitrain.cli import main
from tuitrain.commands.train import build_parser


def test_help_has_a_line_for_every_option_and_lists_the_environment(capsys) -> None:
    for action in build_parser()._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help line"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in ("TUITRAIN_DATA", "TUITRAIN_NO_DOWNLOAD", "XDG_CONFIG_HOME", "TERM", "WORLD_SIZE"):
        assert name in text, name


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_term_dumb_in_a_real_terminal_gets_line_logs(tmp_path: Path) -> None:
    socket, session = f"tuitrain-test-{os.getpid()}", "dumb"
    done = tmp_path / "rc"
    run = (
        f"TERM=dumb {sys.executable} -m tuitrain --max-steps 4 --set data.train_samples=512 "
        f"--set data.val_samples=256 --log-every 2 --run-dir {tmp_path / 'run'}; "
        f"echo $? > {done}; sleep 60"
    )
    tmux = ["tmux", "-L", socket]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", run], check=True
    )
    try:
        deadline = time.monotonic() + 100
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert done.read_text().strip() == "0", screen
    assert "TERM=dumb cannot draw the dashboard: running headless" in screen
    assert "step     4/4 |" in screen and "end   completed" in screen
    assert "\x1b" not in screen and "╭" not in screen  # no dashboard drawn


def test_watch_refuses_term_dumb(tmp_path: Path) -> None:
    """On a TTY with TERM=dumb the viewer would write escape codes as text: one sentence."""
    (tmp_path / "metrics.jsonl").write_text('{"type": "header"}\n')
    env = {**os.environ, "TERM": "dumb"}
    env.pop("TEXTUAL_DRIVER", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: a real terminal on stdin/stdout/stderr
        os.execve(sys.executable, [sys.executable, "-m", "tuitrain", "watch", str(tmp_path)], env)
    output = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 2, output
    assert b"TERM=dumb cannot draw" in output and b"\x1b[" not in output
