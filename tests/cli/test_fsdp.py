"""FSDP2 (distributed.strategy = "fsdp") on CPU with gloo, two processes: it trains as DDP
does (same losses and gradient norms in fp32), with fp16 (MixedPrecisionPolicy fp16/fp32 and a
ShardedGradScaler, its scaler state checkpointed) and with train.compile = on on the fp32
curve, and its whole checkpoints (checkpoint.format = "whole"; sharded ones and gradient
accumulation against DDP: test_fsdp_sharded.py) resume exactly on two ranks and load into one
process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_ddp import end_line, env, records

# a tiny charlm: 2 blocks of width 64, context 32, 64 val sequences, a log point every 2 steps
TINY = [
    "--preset", "charlm-mini", "--no-ui",
    "--set", "model.layers=2", "--set", "model.width=64", "--set", "data.context=32",
    "--set", "data.val_samples=64", "--set", "train.eval_every=0",
    "--max-steps", "12", "--log-every", "2",
]  # fmt: skip
FSDP = ["--set", 'distributed.strategy="fsdp"']


def torchrun(run_dir: Path, *extra: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "tuitrain", *TINY, "--run-dir", str(run_dir), *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]


def trains(run_dir: Path) -> list[dict]:
    return [r for r in records(run_dir) if r["type"] == "train"]


@pytest.mark.slow
def test_fsdp_learns_as_ddp_does_in_fp32_fp16_and_compiled(tmp_path: Path) -> None:
    """One fp32 FSDP run against DDP, and the same run in fp16 and compiled on its curve: four
    jobs of one length (a job's start costs more than its 12 steps)."""
    fsdp, ddp, half, compiled = (tmp_path / name for name in ("fsdp", "ddp", "fp16", "compiled"))
    torchrun(fsdp, *FSDP)
    torchrun(ddp)
    torchrun(half, *FSDP, "--precision", "fp16")
    torchrun(compiled, *FSDP, "--set", 'train.compile="on"')
    recs = records(fsdp)
    header, end = recs[0], recs[-1]
    assert header["world_size"] == 2 and header["config"]["distributed"]["strategy"] == "fsdp"
    assert "world_size 2 (fsdp)" in (fsdp / "train.log").read_text()
    assert end["status"] == "completed" and end["step"] == 12
    losses = [r["loss"] for r in trains(fsdp)]
    assert losses[-1] < losses[0] - 0.5  # it learns
    # the digest of the whole weights, gathered on every rank: the same on both
    assert f"weights {end['weights_digest']}" in end_line(fsdp / "rank-1.log")
    # the same sums over the same batches: DDP's losses and grad norms, to fp32 rounding
    for a, b in zip(trains(fsdp), trains(ddp), strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-3)
    assert any(r.get("kind") == "sample" for r in recs)  # every rank ran it; rank 0 wrote it
    # compiled: the fp32 curve to fp32 rounding; fp16: to its own
    want = {r["step"]: r["loss"] for r in trains(fsdp)}
    assert sorted(want) == [2, 4, 6, 8, 10, 12]
    got = {r["step"]: r["loss"] for r in trains(compiled)}
    assert all(got[s] == pytest.approx(want[s], rel=1e-3) for s in want), (got, want)
    assert records(compiled)[0]["config"]["train"]["compile"] == "on"
    fp16 = records(half)
    assert fp16[0]["precision"] == "fp16" and fp16[-1]["status"] == "completed"
    got = {r["step"]: r["loss"] for r in trains(half)}
    assert all(got[s] == pytest.approx(want[s], rel=2e-2) for s in want), (got, want)
    assert all(r["grad_scale"] > 1 for r in trains(half))  # no step overflowed
    saved = torch_load(half / "checkpoints" / "ckpt-step00000012.dcp" / "state.pt")
    assert trains(half)[-1]["step"] == 12
    assert saved["scaler"]["scale"] == trains(half)[-1]["grad_scale"]


def copy_checkpoint(source: Path, run_dir: Path, *names: str) -> Path:
    (run_dir / "checkpoints").mkdir(parents=True)
    for name in names:
        (run_dir / "checkpoints" / name).write_bytes((source / "checkpoints" / name).read_bytes())
    return run_dir / "checkpoints" / names[0]


@pytest.mark.slow
def test_fsdp_resumes_exactly_and_its_checkpoint_loads_into_one_process(tmp_path: Path) -> None:
    """Gradient accumulation (2 micro-batches) and a checkpoint at step 5, mid log interval:
    two ranks resumed from it log the same losses and end with the same weights as the
    uninterrupted run; one process (no torchrun) resumes the same file and trains on."""
    straight = tmp_path / "straight"
    torchrun(straight, *FSDP, "--set", "optim.grad_accum=2", "--set", 'checkpoint.format="whole"',
             "--set", "checkpoint.every_steps=5", "--set", "checkpoint.keep=10")  # fmt: skip
    saved = torch_load(straight / "checkpoints" / "ckpt-step00000005.pt")
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in saved["model"])
    # the optimizer's own format: parameters numbered, as a plain optimizer.state_dict()
    numbers = [i for g in saved["optimizer"]["param_groups"] for i in g["params"]]
    assert numbers == list(range(len(numbers))) == sorted(saved["optimizer"]["state"])
    two = copy_checkpoint(straight, tmp_path / "two", "ckpt-step00000005.pt",
                          "ckpt-step00000005.rank1.pt")  # fmt: skip
    cmd = [sys.executable, "-m", "tuitrain", "--nproc", "2", "--no-ui", "--resume", str(two)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a = {r["step"]: r["loss"] for r in trains(straight)}
    b = {r["step"]: r["loss"] for r in trains(tmp_path / "two")}
    assert sorted(b) == [6, 8, 10, 12]
    assert all(a[step] == b[step] for step in b), (a, b)
    assert (
        records(straight)[-1]["weights_digest"] == records(tmp_path / "two")[-1]["weights_digest"]
    )
    one = copy_checkpoint(straight, tmp_path / "one", "ckpt-step00000005.pt")
    cmd = [sys.executable, "-m", "tuitrain", "--no-ui", "--resume", str(one)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(tmp_path / "one")
    assert recs[0]["world_size"] == 1
    assert [r for r in recs if r.get("kind") == "resume_world_size"]
    assert recs[-1]["status"] == "completed" and recs[-1]["step"] == 12
    first = trains(tmp_path / "one")[0]
    assert first["step"] == 6 and first["loss"] == pytest.approx(a[6], abs=0.1)


def torch_load(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)
