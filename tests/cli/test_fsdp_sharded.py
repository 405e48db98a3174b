"""Sharded FSDP checkpoints (a ckpt-step<N>.dcp folder, every rank writing its own shard) with
gloo on two ranks: they resume exactly on two (the run accumulating gradients as DDP does),
and a two-rank run killed mid-run resumes in one process at the right step and goes on with
the loss curve of an uninterrupted run.

"The same loss curve" across world sizes means the same global batch: with rank r taking
the stride r::2 of each epoch's permutation, two ranks of data.batch_size 32 take, at every
step, the same 64 samples a single process of data.batch_size 64 takes, so their losses
agree to fp32 rounding (charlm-mini has no dropout). Halving the global batch instead (the
engine's default on a 2 -> 1 resume: it keeps data.batch_size) is another run, noisier at
the same learning rate."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_ddp import env, free_port, records
from tests.cli.test_fsdp import FSDP, TINY, trains


def run(run_dir: Path, *extra: str, nproc: int = 1) -> None:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone",
              f"--nproc_per_node={nproc}"] if nproc > 1 else [sys.executable]  # fmt: skip
    cmd = [*launch, "-m", "tuitrain", *TINY, "--run-dir", str(run_dir), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def resume(checkpoint: Path, run_dir: Path, *extra: str, nproc: int = 1) -> None:
    launch = [sys.executable, "-m", "tuitrain", "--nproc", str(nproc)] if nproc > 1 else [
        sys.executable, "-m", "tuitrain"]  # fmt: skip
    cmd = [*launch, "--no-ui", "--resume", str(checkpoint), "--run-dir", str(run_dir), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in trains(run_dir)}


@pytest.mark.slow
def test_every_rank_writes_its_shard_and_two_ranks_resume_exactly(tmp_path: Path) -> None:
    """Two micro-batches a step: FSDP keeps the gathered weights and the unreduced gradients
    between them (no reshard, no reduce-scatter until the stepping one), the same sums as DDP;
    its sharded checkpoint at step 5 (mid log interval) resumes on two ranks exactly."""
    straight, ddp = tmp_path / "straight", tmp_path / "ddp"
    accum = ["--set", "optim.grad_accum=2"]
    run(straight, *FSDP, *accum, "--set", "checkpoint.every_steps=5",
        "--set", "checkpoint.keep=10", nproc=2)  # fmt: skip
    run(ddp, *accum, nproc=2)
    fsdp_trains, ddp_trains = trains(straight), trains(ddp)
    assert (
        [r["step"] for r in fsdp_trains] == [r["step"] for r in ddp_trains] == [2, 4, 6, 8, 10, 12]
    )
    for a, b in zip(fsdp_trains, ddp_trains, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    folder = straight / "checkpoints"
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["ckpt-step00000005.dcp", "ckpt-step00000010.dcp",
                     "ckpt-step00000012.dcp", "latest"]  # fmt: skip
    ckpt = folder / "ckpt-step00000005.dcp"
    assert sorted(p.name for p in ckpt.iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp", "rank1.pt", "state.pt"]  # fmt: skip
    # each rank wrote its half of the weights and moments: neither file holds them all
    halves = [(ckpt / f"__{r}_0.distcp").stat().st_size for r in (0, 1)]
    assert max(halves) < 0.75 * sum(halves)
    resume(ckpt, tmp_path / "two", nproc=2)
    a, b = losses(straight), losses(tmp_path / "two")
    assert sorted(b) == [6, 8, 10, 12]
    assert all(a[step] == b[step] for step in b), (a, b)
    assert records(straight)[-1]["weights_digest"] == records(tmp_path / "two")[-1][
        "weights_digest"]  # fmt: skip


def partial_records(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def start_ranks(run_dir: Path, *extra: str) -> list[subprocess.Popen]:
    port = str(free_port())
    cmd = [sys.executable, "-m", "tuitrain", *TINY, "--run-dir", str(run_dir), *extra]
    return [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                 LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                 MASTER_PORT=port))
        for r in (0, 1)
    ]  # fmt: skip


@pytest.mark.slow
def test_a_killed_two_rank_run_resumes_in_one_process_on_the_same_curve(tmp_path: Path) -> None:
    """The done-when of issue #39: two FSDP ranks SIGKILLed once a sharded checkpoint is on
    disk; one process resumes it at its step with the global batch kept (data.batch_size
    64 = 2 x 32) and logs the losses of an uninterrupted one-process run; that run's own
    sharded checkpoint resumes on two FSDP ranks on the same curve too (1 -> 2)."""
    steps = ["--max-steps", "24", "--set", "checkpoint.keep=10"]
    killed = tmp_path / "killed"
    ranks = start_ranks(killed, *FSDP, *steps, "--set", "checkpoint.every_steps=6")
    saved = killed / "checkpoints" / "ckpt-step00000006.dcp"
    deadline = time.monotonic() + 240
    while not saved.exists() and time.monotonic() < deadline:
        assert all(r.poll() is None for r in ranks) or saved.exists(), ranks[0].stderr
        time.sleep(0.05)
    for r in ranks:
        r.send_signal(signal.SIGKILL)  # no goodbye, whatever it was doing (maybe saving)
    for r in ranks:
        r.communicate(timeout=60)
    assert saved.is_dir()
    straight = tmp_path / "straight"
    run(straight, *steps, "--set", "data.batch_size=64", "--set", 'checkpoint.format="sharded"',
        "--set", "checkpoint.every_steps=12")  # fmt: skip
    want = losses(straight)
    assert sorted(want) == list(range(2, 25, 2))
    # before the kill, two ranks of 32 took the same samples as one process of 64
    cut = partial_records(killed)  # its last line may be cut short by the kill
    before = {r["step"]: r["loss"] for r in cut if r.get("type") == "train"}
    assert before and all(before[s] == pytest.approx(want[s], rel=1e-5) for s in before)
    one = tmp_path / "one"
    resume(saved, one, "--set", "data.batch_size=64")
    recs = records(one)
    assert recs[0]["world_size"] == 1
    assert [r["step"] for r in recs if r.get("kind") == "resume"] == [6]
    warning = next(r for r in recs if r.get("kind") == "resume_world_size")
    assert "same global batch (64)" in warning["message"]
    got = losses(one)
    assert sorted(got) == list(range(8, 25, 2))
    assert all(got[s] == pytest.approx(want[s], rel=1e-5) for s in got), (got, want)
    assert recs[-1]["status"] == "completed" and recs[-1]["step"] == 24
    assert recs[-1]["val_loss"] == pytest.approx(records(straight)[-1]["val_loss"], rel=1e-4)
    # 1 -> 2: the one process's sharded checkpoint on two FSDP ranks, global batch kept
    two = tmp_path / "two"
    resume(straight / "checkpoints" / "ckpt-step00000012.dcp", two, *FSDP,
           "--set", "data.batch_size=32", nproc=2)  # fmt: skip
    got = losses(two)
    assert sorted(got) == list(range(14, 25, 2))
    assert all(got[s] == pytest.approx(want[s], rel=1e-5) for s in got), (got, want)
    assert os.listdir(two / "checkpoints")  # it saved on: sharded (FSDP, auto)
    assert (two / "checkpoints" / "ckpt-step00000024.dcp").is_dir()
