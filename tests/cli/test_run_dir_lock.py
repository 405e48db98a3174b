"""One writer per run dir: a second run in a run dir that a live run holds is refused in one
sentence naming the holder's pid, exit 2, and the live run's files are untouched."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUN = [sys.executable, "-m", "tuitrain", "--no-ui", "--set", "data.train_samples=512",
       "--set", "data.val_samples=256", "--log-every", "1"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_second_run_in_a_held_run_dir_is_refused(tmp_path: Path) -> None:
    first = subprocess.Popen(
        [*RUN, "--epochs", "100", "--set", "train.pace_s=0.1", "--run-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        deadline = time.monotonic() + 90
        while (
            not first.stdout.readline().partition(" ")[2].startswith("step")
            and time.monotonic() < deadline
        ):
            pass
        for second_args in (["--max-steps", "2"], ["--resume", "auto", "--max-steps", "400"]):
            second = subprocess.run(
                [*RUN, *second_args, "--run-dir", str(tmp_path)],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            if second_args[0] == "--resume" and "no checkpoint" in second.stderr:
                continue  # nothing saved yet to resume from: refused for that reason first
            assert second.returncode == 2, second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and f"in use by a running tuitrain (pid {first.pid})" in lines[0]
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 143
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records].count("header") == 1  # nobody else wrote in it
    # the run is over: the run dir is free again
    again = subprocess.run(
        [*RUN, "--max-steps", "2", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr


def test_the_refusal_comes_before_torch_is_imported(tmp_path: Path) -> None:
    """A held run dir is refused in a blink (no ~5 s torch import first), for a new run and a
    resume alike; a free one, or one whose run has ended, is not refused by the probe."""
    from tuitrain.core.errors import UserError
    from tuitrain.rundir.lock import RunDirLock, refuse_if_held

    refuse_if_held(tmp_path)  # no lock file yet
    lock = RunDirLock(tmp_path)  # what a live run holds (its pid inside)
    try:
        with pytest.raises(UserError, match=r"in use by a running tuitrain \(pid \d+\)"):
            refuse_if_held(tmp_path)
        probe = (
            "import sys; from tuitrain.cli import main; code = main(sys.argv[1:]); "
            "print(code, 'torch' in sys.modules)"
        )
        ckpt = tmp_path / "checkpoints" / "ckpt-step00000002.pt"  # its run dir: tmp_path
        for extra in (
            ["--max-steps", "2", "--run-dir", str(tmp_path)],
            ["--resume", "auto", "--run-dir", str(tmp_path)],
            ["--resume", str(ckpt)],
        ):
            proc = subprocess.run(
                [sys.executable, "-c", probe, "--no-ui", *extra],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert proc.stdout.split() == ["2", "False"], (proc.stdout, proc.stderr)
            assert "in use by a running tuitrain" in proc.stderr
    finally:
        lock.release()
    refuse_if_held(tmp_path)  # the run ended: its lock went with it
    pid, host, start, space = (tmp_path / ".tuitrain.lock").read_text().split()  # the writer
    assert pid.isdigit() and host == socket.gethostname() and start.isdigit()
    assert space == str(os.stat("/proc/self/ns/pid").st_ino)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_the_probe_leaves_an_odd_lock_file_to_the_lock(tmp_path: Path, kind: str) -> None:
    """A FIFO planted as the lock file must not hang the start (it would block an O_RDONLY
    open), and a directory must not raise a traceback: the probe lets them through and
    RunDirLock refuses them in one sentence, before anything is written."""
    import os

    from tuitrain.core.errors import UserError
    from tuitrain.rundir.layout import LOCK_NAME, resumed_run_dir
    from tuitrain.rundir.lock import RunDirLock, refuse_if_held

    odd = tmp_path / LOCK_NAME
    os.mkfifo(odd) if kind == "fifo" else odd.mkdir()
    assert refuse_if_held(tmp_path) is None  # returned: no hang, no exception
    with pytest.raises(UserError, match=r"holds a \.tuitrain\.lock that is not a file.*remove"):
        RunDirLock(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]  # nothing else written
    # where `--resume PATH` continues without --run-dir: the probe's target
    ckpt = tmp_path / "checkpoints" / "ckpt-step00000002.pt"
    assert resumed_run_dir(str(ckpt)) == tmp_path.resolve()
    assert resumed_run_dir(str(tmp_path / "model.pt")) is None and resumed_run_dir("auto") is None
