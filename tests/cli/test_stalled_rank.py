"""The stalled-rank watch under torchrun (2 ranks, gloo): a rank made to sleep is named, with
its step and every rank's stacks, and the stop action ends the job instead of a hang."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_ddp import SMALL, end_line, env, records

SLEEPY = 'model.name="tests.engine.stall_for_tests:sleeps_on_rank_1"'


@pytest.mark.slow
def test_a_sleeping_rank_is_named_with_every_ranks_stacks_and_stop_ends_the_job(
    tmp_path: Path,
) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "tuitrain", *SMALL, "--max-steps", "8", "--run-dir", str(tmp_path),
           "--set", SLEEPY, "--set", "alerts.stalled_rank_s=3",
           "--set", "alerts.stalled_rank=\"stop\""]  # fmt: skip
    # rank 1 sleeps 600 s in its third step: only the stop ends the job within the limit
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=240)
    assert proc.returncode != 0, proc.stderr[-2000:]
    recs = records(tmp_path)
    [alert] = [r for r in recs if r.get("kind") == "alert" and r["alert"] == "stalled_rank"]
    assert alert["rank"] == 1 and alert["step"] == 3, alert
    assert alert["why"] == "behind" and alert["phase"] == "forward"
    assert alert["waiting_ranks"] == [0] and alert["action"] == "stop"
    assert alert["seconds"] >= 3 and alert["stacks"] == str(tmp_path / "stacks")
    assert "rank 1 has not moved" in alert["message"]
    stacks = {n: (tmp_path / "stacks" / f"rank-{n}.txt").read_text() for n in (0, 1)}
    assert "sleep_on_rank_1" in stacks[1] and "stall_for_tests.py" in stacks[1]
    assert "sleep_on_rank_1" not in stacks[0]
    assert "backward" in stacks[0]  # rank 0 waits in the gradient all-reduce
    end = recs[-1]
    assert end["type"] == "end" and end["status"] == "failed" and end["step"] == 2, end
    assert "stalled_rank" in end["reason"]
    line1 = end_line(tmp_path / "rank-1.log")
    assert "failed" in line1 and "stalled_rank" in line1


@pytest.mark.slow
def test_warn_names_a_rank_that_sleeps_past_the_bound_once_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "tuitrain", *SMALL, "--max-steps", "6", "--run-dir", str(tmp_path),
           "--set", SLEEPY, "--set", "alerts.stalled_rank_s=2"]  # fmt: skip
    sleepy = env(TUITRAIN_TEST_SLEEP_S="8")  # four bounds: one alert, not one per look
    proc = subprocess.run(cmd, capture_output=True, text=True, env=sleepy, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(tmp_path)
    alerts = [r for r in recs if r.get("kind") == "alert" and r["alert"] == "stalled_rank"]
    assert [(a["rank"], a["step"], a["action"]) for a in alerts] == [(1, 3, "warn")]
    assert "sleep_on_rank_1" in (tmp_path / "stacks" / "rank-1.txt").read_text()
    assert recs[-1]["status"] == "completed" and recs[-1]["step"] == 6


@pytest.mark.slow
def test_one_ranks_slow_mid_epoch_evaluation_is_no_stall_and_stop_leaves_the_job_alone(
    tmp_path: Path,
) -> None:
    """Rank 1's evaluation at step 3 (train.eval_every) takes 5 s longer than rank 0's, five
    times the bound: rank 0 goes on into step 4 and waits in its all-reduce. A healthy job:
    no verdict, and the stop action does not end it."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "tuitrain", *SMALL, "--max-steps", "6", "--run-dir", str(tmp_path),
           "--set", "data.batch_size=64", "--set", "train.eval_every=3",
           "--set", "task.name='tests.engine.stall_for_tests:slow_eval_on_rank_1'",
           "--set", "alerts.stalled_rank_s=1", "--set", "alerts.stalled_rank_factor=0.1",
           "--set", "alerts.stalled_rank=\"stop\""]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(tmp_path)
    alerts = [r for r in recs if r.get("kind") == "alert"]
    assert [a for a in alerts if a["alert"] in ("stalled_rank", "stall")] == [], alerts
    evals = {r["step"]: r["time"] for r in recs if r["type"] == "eval"}
    assert list(evals) == [3, 6]  # 3: mid-epoch
    late = [r for r in recs if r["type"] == "train" and r["step"] == 4]  # rank 0 waited for 1
    assert late and late[0]["time"] > evals[3], (evals, late)
    assert not (tmp_path / "stacks").exists()  # no dump was asked for
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
    assert recs[-1]["step"] == 6
    assert "completed" in end_line(tmp_path / "rank-1.log")
