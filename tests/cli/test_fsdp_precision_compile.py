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
