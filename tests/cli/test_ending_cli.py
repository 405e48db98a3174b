"""The ending lines after a dashboard leaves the terminal: printed on stdout once the
alternate screen is gone (`tuitrain watch` on a pseudo-terminal, quit with q)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ui.fake_records import records
from tuitrain.metrics.records import end_record

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def read_until(master: int, out: bytearray, proc: subprocess.Popen, until: bytes | None,
               seconds: float) -> None:  # fmt: skip
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (until is None or until not in out):
        if select.select([master], [], [], 0.1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: everything on the pty is gone
                return
            if not chunk:
                return
            out.extend(chunk)
        elif until is None and proc.poll() is not None:
            return


def test_watch_ends_with_what_happened_and_the_next_commands(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    recs = [*records("bf16", "cpu", steps=100), end_record("completed", "max_steps reached", 100)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("TEXTUAL_DRIVER", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "watch", str(run)],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    out = bytearray()
    try:
        read_until(master, out, proc, b"Throughput", 60)
        assert b"Throughput" in out, out[-2000:]
        os.write(master, b"q")
        read_until(master, out, proc, None, 20)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert code == 0, bytes(out[-2000:])
    after = bytes(out[out.rfind(b"\x1b[?1049l") :]).decode(errors="replace")  # screen gone
    assert "tuitrain watch: run completed (max_steps reached)" in after, after
    assert f"files: {run}" in after and f"tuitrain export {run} --format csv" in after


FAILING = """\
import tuitrain

def main():
    run = tuitrain.init(project="t")
    run.log({"loss": 1.0}, step=1)
    print("about to fail", flush=True)
    raise ValueError("shapes do not match")

main()
"""


def test_a_failed_script_run_ends_with_its_last_output_and_traceback(tmp_path: Path) -> None:
    script = tmp_path / "train_fail.py"
    script.write_text(FAILING)
    run = tmp_path / "run"
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("TEXTUAL_DRIVER", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(run), "--",
         sys.executable, str(script)],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    out = bytearray()
    try:
        read_until(master, out, proc, b"exited with code", 60)
        if proc.poll() is None:  # the view stays until q
            os.write(master, b"q")
        read_until(master, out, proc, None, 20)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert code == 1, bytes(out[-2000:])
    after = bytes(out[out.rfind(b"\x1b[?1049l") :]).decode(errors="replace")
    assert "tuitrain run: run failed" in after, after
    assert "| ValueError: shapes do not match" in after and "| about to fail" in after
    assert f"traceback points at {script}:7 (in main)" in after


def test_the_training_dashboard_ends_with_the_run_and_the_next_commands(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("TEXTUAL_DRIVER", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "--preset", "fashion-mini", "--max-steps", "4",
         "--log-every", "2", "--device", "cpu", "--run-dir", str(run),
         "--set", "data.train_samples=512", "--set", "data.val_samples=256"],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, cwd=tmp_path,
    )  # fmt: skip
    os.close(slave)
    out = bytearray()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            read_until(master, out, proc, None, 0.5)
            metrics = run / "metrics.jsonl"
            if metrics.is_file() and '"type": "end"' in metrics.read_text():
                break
        for _ in range(3):  # q (and whatever a quit asks) until the dashboard has gone
            if proc.poll() is not None:
                break
            os.write(master, b"q")
            read_until(master, out, proc, None, 3)
        read_until(master, out, proc, None, 10)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert code == 0, bytes(out[-3000:])
    after = bytes(out[out.rfind(b"\x1b[?1049l") :]).decode(errors="replace")
    assert "tuitrain: run completed" in after and "steps 4 · best val_acc" in after, after
    assert f"tuitrain watch {run}" in after and "checkpoints/" in after
