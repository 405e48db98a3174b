"""fp16 under FSDP: the GradScaler sees one shard of the gradients per rank, so an overflow
in one rank's shard must skip the step on every rank (ShardedGradScaler all-reduces the
flag), or the ranks' weights would part. Real FSDP2 on two gloo ranks (fsdp_fp16_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_ddp import env

WORKER = Path(__file__).with_name("fsdp_fp16_worker.py")


@pytest.mark.slow
def test_an_inf_in_one_ranks_shard_skips_the_step_on_every_rank() -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=2", str(WORKER)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 2, proc.stdout[-1500:] + proc.stderr[-2500:]
    ranks = sorted((json.loads(ln[7:]) for ln in lines), key=lambda r: r["rank"])
    for rank in ranks:
        poisoned, clean = rank["steps"]
        assert poisoned["sharded"] == "DTensor" and poisoned["grad_dtype"] == "torch.float32"
        assert not poisoned["stepped"] and not poisoned["norm_finite"]
        assert poisoned["scale"] == 65536.0 / 2  # backed off once, on both ranks
        assert clean["stepped"] and clean["norm_finite"] and clean["scale"] == 32768.0
