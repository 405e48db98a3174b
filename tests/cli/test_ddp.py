"""DDP on CPU with gloo, two processes: both launch forms, identical weights, agreed stops,
and a dead rank that ends the job instead of hanging it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# 2048 images / 2 ranks / 256 per batch = 4 steps per epoch
SMALL = [
    "--no-ui",
    "--set",
    "data.train_samples=2048",
    "--set",
    "data.val_samples=256",
    "--log-every",
    "2",
]


def env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TUITRAIN_NO_DOWNLOAD": "1",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def end_line(log: Path) -> str:
    return [
        line for line in log.read_text().splitlines() if line.partition(" ")[2].startswith("end ")
    ][-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_two_rank_run(run_dir: Path, steps: int) -> None:
    recs = records(run_dir)
    header = recs[0]
    assert header["type"] == "header" and header["world_size"] == 2
    assert header["global_batch"] == 512
    end = recs[-1]
    assert end["status"] == "completed" and end["step"] == steps
    assert end["samples"] == steps * 512  # global: the sum over both ranks
    # rank 1 is quiet (no JSONL of its own) and logs to rank-1.log; same final weights
    digest = end["weights_digest"]
    assert f"weights {digest}" in end_line(run_dir / "rank-1.log")
    assert f"weights {digest}" in end_line(run_dir / "train.log")
    trains = [r for r in recs if r["type"] == "train"]
    assert all(len(r["rank_step_time_s"]) == 2 for r in trains)


@pytest.mark.slow
def test_torchrun_module_form(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "tuitrain",
        *SMALL,
        "--max-steps",
        "4",
        "--run-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    check_two_rank_run(tmp_path, 4)


def start_ranks(run_dir: Path, *extra: str) -> list[subprocess.Popen]:
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        rank_env = env(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        cmd = [
            sys.executable,
            "-m",
            "tuitrain",
            *SMALL,
            "--epochs",
            "50",
            "--run-dir",
            str(run_dir),
            "--set",
            "train.pace_s=0.1",
            *extra,
        ]
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=rank_env
            )
        )
    return procs


def wait_for_step(proc: subprocess.Popen) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.stdout.readline().partition(" ")[2].startswith("step"):
            return
    raise AssertionError("rank 0 never logged a step")


@pytest.mark.slow
def test_stop_on_rank_0_stops_both_at_the_same_step(tmp_path: Path) -> None:
    rank0, rank1 = start_ranks(tmp_path)
    wait_for_step(rank0)
    rank0.send_signal(signal.SIGTERM)  # only rank 0 is told
    rank0.communicate(timeout=60)
    rank1.communicate(timeout=60)
    assert rank0.returncode == 143
    assert rank1.returncode == 0
    step0 = re.search(r"step (\d+)", end_line(tmp_path / "train.log")).group(1)
    line1 = end_line(tmp_path / "rank-1.log")
    assert "stopped" in line1 and f"step {step0}" in line1


@pytest.mark.slow
def test_a_dead_rank_ends_the_job_within_the_timeout(tmp_path: Path) -> None:
    rank0, rank1 = start_ranks(tmp_path, "--set", "distributed.timeout_s=20")
    wait_for_step(rank0)
    killed_at = time.monotonic()
    rank1.kill()  # SIGKILL: no goodbye
    rank1.wait(timeout=10)
    _, err = rank0.communicate(timeout=60)
    assert rank0.returncode not in (0, None)
    assert time.monotonic() - killed_at < 40
    assert "error:" in err


@pytest.mark.slow
def test_a_slow_rank_is_flagged_as_a_straggler(tmp_path: Path) -> None:
    """Rank 1's forward sleeps 0.1 s: its own work per step (data wait + forward) is far
    above the median, though lockstep makes both ranks' step times equal."""
    slow = ["--set", 'model.name="tests.engine.models_for_tests:slow_on_rank_1"']
    rank0, rank1 = start_ranks(tmp_path, "--max-steps", "8", *slow)
    _, err0 = rank0.communicate(timeout=120)
    _, err1 = rank1.communicate(timeout=120)
    assert (rank0.returncode, rank1.returncode) == (0, 0), err0[-1500:] + err1[-1500:]
    recs = records(tmp_path)
    trains = [r for r in recs if r["type"] == "train"]
    busy = trains[-1]["rank_busy_s"]
    assert len(busy) == 2 and busy[1] > 0.1 > busy[0]
    steps = trains[-1]["rank_step_time_s"]
    assert abs(steps[0] - steps[1]) < 0.2 * max(steps)  # lockstep: equal step times
    flagged = [r for r in recs if r.get("kind") == "alert" and r["alert"] == "straggler"]
    assert len(flagged) == 1  # said once, not at every log point
    assert flagged[0]["rank"] == 1 and flagged[0]["level"] == "warning"


@pytest.mark.slow
def test_nproc_flag_runs_ddp_and_resumes_bit_identically(tmp_path: Path) -> None:
    """`--nproc 2` without --no-ui: rank 0 decides on the UI, and without a terminal runs
    headless. Then a 2-rank resume from a checkpoint in the middle of an epoch and of a log
    interval logs the same losses and ends with the same weights as the uninterrupted run:
    rank 1's own loss window (its shard's losses since the last log point) and RNG are saved
    beside rank 0's checkpoint and restored."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    every_step = ["--epochs", "2", "--set", "checkpoint.every_steps=3",
                  "--set", "checkpoint.keep=10"]  # fmt: skip
    cmd = [sys.executable, "-m", "tuitrain", "--nproc", "2", *SMALL[1:], *every_step]
    proc = subprocess.run(
        [*cmd, "--run-dir", str(straight)], capture_output=True, text=True, env=env(), timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("no terminal") == 1  # rank 0 says it; rank 1 is quiet
    check_two_rank_run(straight, 8)
    saved = straight / "checkpoints"
    assert (saved / "ckpt-step00000003.rank1.pt").is_file()
    (resumed / "checkpoints").mkdir(parents=True)
    for name in ("ckpt-step00000003.pt", "ckpt-step00000003.rank1.pt"):
        (resumed / "checkpoints" / name).write_bytes((saved / name).read_bytes())
    resume = [sys.executable, "-m", "tuitrain", "--nproc", "2", "--no-ui", "--resume",
              str(resumed / "checkpoints" / "ckpt-step00000003.pt")]  # fmt: skip
    proc = subprocess.run(resume, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a = {r["step"]: r["loss"] for r in records(straight) if r["type"] == "train"}
    b = {r["step"]: r["loss"] for r in records(resumed) if r["type"] == "train"}
    assert sorted(b) == [4, 6, 8]  # step 3: mid-epoch 1 (4 steps each), mid-interval (log 2)
    assert all(a[step] == b[step] for step in b), (a, b)
    assert records(straight)[-1]["weights_digest"] == records(resumed)[-1]["weights_digest"]
    assert "has no state of its own" not in (resumed / "rank-1.log").read_text()
    assert not [r for r in records(resumed) if r.get("kind") == "resume_world_size"]


@pytest.mark.slow
def test_resuming_with_another_world_size_says_what_changes(tmp_path: Path) -> None:
    """Saved by one process, resumed by two: a warning event in the main log and the metrics
    says the global batch and the epoch length change, instead of a silent jump."""
    one = [sys.executable, "-m", "tuitrain", *SMALL, "--max-steps", "3",
           "--set", "checkpoint.every_steps=3", "--run-dir", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(one, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    two = [sys.executable, "-m", "tuitrain", "--nproc", "2", "--no-ui", "--resume", "auto",
           "--run-dir", str(tmp_path), "--max-steps", "5"]  # fmt: skip
    proc = subprocess.run(two, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [change] = [r for r in records(tmp_path) if r.get("kind") == "resume_world_size"]
    assert change["level"] == "warning"
    assert "from a checkpoint saved by 1" in change["message"]
    assert "global batch changes from 256 to 512" in change["message"]
    assert "from 8 to 4 steps" in change["message"]
    assert "resumed with 2 rank(s)" in (tmp_path / "train.log").read_text()


def start_launcher(run_dir: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tuitrain", "--nproc", "2", *SMALL, "--epochs", "50"]
    cmd += ["--run-dir", str(run_dir), "--set", "train.pace_s=0.1"]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()
    )


def rank_pids(launcher: int) -> list[int]:
    """The launcher's children: torchrun's agent runs in it and spawns the ranks."""
    out = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True)
    return [int(pid) for pid in out.stdout.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_sigterm_to_the_nproc_launcher_exits_143_with_the_ranks_saved(tmp_path: Path) -> None:
    launcher = start_launcher(tmp_path)
    wait_for_step(launcher)
    launcher.send_signal(signal.SIGTERM)
    _, err = launcher.communicate(timeout=90)
    assert launcher.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "SignalException" not in err
    for log in ("train.log", "rank-1.log"):
        line = end_line(tmp_path / log)
        assert "stopped" in line and "SIGTERM" in line, (log, line)
    assert list((tmp_path / "checkpoints").glob("ckpt-step*.pt"))  # saved on the way out


@pytest.mark.slow
def test_ranks_of_a_killed_launcher_stop_instead_of_training_on(tmp_path: Path) -> None:
    launcher = start_launcher(tmp_path)
    wait_for_step(launcher)
    ranks = rank_pids(launcher.pid)
    assert len(ranks) == 2, ranks
    launcher.kill()  # SIGKILL: it cannot pass anything on
    launcher.wait(timeout=10)
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(alive(pid) for pid in ranks), "ranks trained on as orphans"
    lines = [end_line(tmp_path / log) for log in ("train.log", "rank-1.log")]
    assert all("stopped" in line for line in lines), lines
    # the rank whose watch sees the launcher gone first says so; the other may stop on its
    # request at the next log point before its own watch looks (which first: the machine's load)
    assert any("launcher" in line for line in lines), lines
    assert all("launcher" in line or "another rank's request" in line for line in lines), lines
