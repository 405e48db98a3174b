"""FSDP with fp16 (MixedPrecisionPolicy fp16/fp32 and a ShardedGradScaler) and with
train.compile = on, on two gloo ranks: both train charlm-mini tiny on the fp32 FSDP run's
curve (compile to fp32 rounding, fp16 to its own), and fp16's scaler state is checkpointed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.cli.test_ddp import records
from tests.cli.test_fsdp import FSDP
from tests.cli.test_fsdp_sharded import losses, run


@pytest.mark.slow
def test_fsdp_runs_fp16_and_compiled_on_the_fp32_curve(tmp_path: Path) -> None:
    six = ["--max-steps", "6", *FSDP]
    run(tmp_path / "fp32", *six, nproc=2)
    run(tmp_path / "fp16", *six, "--precision", "fp16", nproc=2)
    run(tmp_path / "compiled", *six, "--set", 'train.compile="on"', nproc=2)
    want = losses(tmp_path / "fp32")
    assert sorted(want) == [2, 4, 6] and want[6] < want[2]
    compiled = losses(tmp_path / "compiled")
    assert all(compiled[s] == pytest.approx(want[s], rel=1e-3) for s in want), (compiled, want)
    assert records(tmp_path / "compiled")[0]["config"]["train"]["compile"] == "on"
    half = records(tmp_path / "fp16")
    assert half[0]["precision"] == "fp16" and half[-1]["status"] == "completed"
    got = losses(tmp_path / "fp16")
    assert all(got[s] == pytest.approx(want[s], rel=2e-2) for s in want), (got, want)
    assert all(r["grad_scale"] > 1 for r in half if r["type"] == "train")  # no step overflowed
    saved = torch.load(tmp_path / "fp16" / "checkpoints" / "ckpt-step00000006.dcp" / "state.pt",
                       weights_only=True)  # fmt: skip
    last = [r for r in half if r["type"] == "train"][-1]
    assert last["step"] == 6 and saved["scaler"]["scale"] == last["grad_scale"]


@pytest.mark.slow
def test_fsdp_accumulates_as_ddp_does(tmp_path: Path) -> None:
    """Two micro-batches a step: FSDP keeps the gathered weights and the unreduced gradients
    between them (no reshard, no reduce-scatter until the stepping one); same sums as DDP."""
    accum = ["--max-steps", "6", "--set", "optim.grad_accum=2"]
    run(tmp_path / "fsdp", *accum, *FSDP, nproc=2)
    run(tmp_path / "ddp", *accum, nproc=2)
    fsdp = [r for r in records(tmp_path / "fsdp") if r["type"] == "train"]
    ddp = [r for r in records(tmp_path / "ddp") if r["type"] == "train"]
    assert [r["step"] for r in fsdp] == [r["step"] for r in ddp] == [2, 4, 6]
    for a, b in zip(fsdp, ddp, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
