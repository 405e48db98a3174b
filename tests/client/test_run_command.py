"""`tuitrain run -- CMD` on real scripts: exit codes, end records, output, signals, and
what `watch` and `export` make of the run."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
pytestmark = pytest.mark.slow


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def tuitrain_run(run_dir: Path, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(run_dir), "--no-ui", "--",
         *command],
        capture_output=True, text=True, timeout=timeout, env=env(),
    )  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def test_a_plain_loop_under_tuitrain_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "plain"
    done = tuitrain_run(run_dir, sys.executable, str(SCRIPTS / "plain_loop.py"))
    assert done.returncode == 0, done.stderr
    assert "step 39 loss" in done.stdout  # the script's own output, passed through
    # and the records as line logs, each opening with its wall clock (HH:MM:SS, local)
    assert re.search(r"^\[tuitrain\] \d\d:\d\d:\d\d end   completed", done.stdout, re.M)
    assert "step 39 loss" in (run_dir / "output.log").read_text()
    recs = records(run_dir)
    assert recs[0]["preset"] == "plain_loop" and recs[-1]["status"] == "completed"
    trains = [r for r in recs if r["type"] == "train"]
    assert len(trains) == 40 and trains[-1]["loss"] < trains[0]["loss"]
    assert all(r["weight_norm"] > 0 for r in trains)
    out = tmp_path / "plain.csv"
    export = subprocess.run(
        [sys.executable, "-m", "tuitrain", "export", str(run_dir), "--format", "csv", "--out",
         str(out)], capture_output=True, text=True, env=env(), timeout=60,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr
    rows = list(csv.DictReader(out.open()))
    assert {"weight_norm", "val_mae", "val_loss"} <= set(rows[0])


def test_a_crashing_script_gives_its_exit_code_and_an_end_record(tmp_path: Path) -> None:
    run_dir = tmp_path / "crash"
    done = tuitrain_run(run_dir, sys.executable, str(SCRIPTS / "plain_loop.py"), "--crash")
    assert done.returncode == 1
    end = records(run_dir)[-1]
    assert end["status"] == "failed"
    assert end["reason"] == "RuntimeError: the loader ran dry at step 40"


def test_a_wandb_script_with_one_changed_import(tmp_path: Path) -> None:
    run_dir = tmp_path / "wb"
    done = tuitrain_run(run_dir, sys.executable, str(SCRIPTS / "wandb_style.py"))
    assert done.returncode == 0, done.stderr
    assert "wandb.watch is not supported" in done.stdout  # merged output, said once
    recs = records(run_dir)
    trains = [r for r in recs if r["type"] == "train"]
    assert len(trains) == 30 and all("loss" in r and "throughput/examples" in r for r in trains)
    # as in wandb, a committed log call is a step of its own: each eval call takes one
    assert [r["step"] for r in recs if r["type"] == "eval"] == [10, 21, 32]
    assert recs[-1]["summary"]["final"] > 0


def test_a_script_that_never_logs_still_ends_with_a_record(tmp_path: Path) -> None:
    run_dir = tmp_path / "silent"
    done = tuitrain_run(run_dir, sys.executable, "-c", "import sys; sys.exit(3)")
    assert done.returncode == 3
    recs = records(run_dir)
    assert [r["type"] for r in recs] == ["header", "end"]
    assert recs[-1]["status"] == "failed" and "logged nothing" in recs[-1]["reason"]


def test_a_missing_command_is_one_sentence(tmp_path: Path) -> None:
    done = tuitrain_run(tmp_path / "x", "no-such-program-here")
    assert done.returncode == 2
    assert "cannot start 'no-such-program-here'" in done.stderr


@pytest.mark.parametrize(("script", "signum", "status"), [
    ("forever.py", signal.SIGTERM, "stopped"),
    ("stubborn.py", signal.SIGINT, "stopped"),
])  # fmt: skip
def test_signals_reach_the_script(tmp_path: Path, script: str, signum: int, status: str) -> None:
    """SIGTERM to tuitrain run goes to the script; a script that ignores SIGINT is ended by
    the SIGTERM that follows the grace period; either way an end record is written."""
    run_dir = tmp_path / "sig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(run_dir), "--no-ui",
         "--grace-s", "1", "--", sys.executable, str(SCRIPTS / script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        path = run_dir / "metrics.jsonl"
        if path.exists() and path.read_text().count('"train"') >= 5:
            break
        time.sleep(0.1)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    end = records(run_dir)[-1]
    assert end["type"] == "end" and end["status"] in (status, "completed"), (end, err)
    if script == "stubborn.py":
        assert proc.returncode == 143 and end["reason"] == "stopped by SIGTERM"
    else:
        assert proc.returncode in (0, 143)


def test_an_alert_with_action_stop_stops_the_script_and_runs_on_alert(tmp_path: Path) -> None:
    run_dir, hook = tmp_path / "spiky", tmp_path / "alerts"
    hook.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--run-dir", str(run_dir), "--no-ui",
         "--alert", "loss_spike=stop", "--alert", "divergence=warn",
         "--on-alert", f"cat > $(mktemp -p {hook})", "--",
         sys.executable, str(SCRIPTS / "spiky.py")],
        capture_output=True, text=True, timeout=120, env=env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "should_stop=True" in done.stdout
    assert "alert loss_spike: asking the script to stop (SIGINT)" in done.stdout
    # each alert's JSON on the hook's stdin, a file each (the hooks run concurrently; the
    # spike is also a divergence)
    alerts = {a["alert"]: a for a in (json.loads(f.read_text()) for f in hook.iterdir())}
    assert alerts["loss_spike"]["action"] == "stop" and alerts["divergence"]["action"] == "warn"
    assert records(run_dir)[-1]["status"] == "completed"


def test_a_bad_alert_flag_is_one_sentence(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--alert", "loss_spike=pause", "--",
         sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=60, env=env(), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert "the action must be off, warn or stop" in done.stderr
