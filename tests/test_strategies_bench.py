"""bench/strategies.py (DDP against FSDP, and the rank watch's cost) and its GPU wrapper
bench/fsdp_gpu.sh: the plumbing, at tiny sizes, so a break shows here and not on a lent GPU.
The figures are the benchmark's; here only that each layout ran and reported them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_strategies_bench_runs_ddp_and_fsdp_and_reports_their_figures() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "strategies.py"), "--steps", "6",
           "--log-every", "2", "--repeats", "1", "--only", "ddp,fsdp-nowatch"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    for name in ("ddp", "fsdp-nowatch"):
        figures = summary[name]
        assert figures["tokens_per_s"]["median"] > 0
        assert figures["peak_memory_per_rank_mib"]["median"] > 10  # a torch process's RSS
        assert 0 < figures["comm_frac"]["median"] <= 1
        assert figures["memory_kind"] == "host RSS"
    assert summary["ddp"]["comm_exposed_frac"]["n"] == 1  # DDP measures it; FSDP does not
    assert summary["fsdp-nowatch"]["comm_exposed_frac"]["n"] == 0
    assert "fsdp_over_ddp_tokens" not in summary  # only with both plain layouts


def test_strategies_bench_refuses_an_unknown_layout() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "strategies.py"), "--only", "ddp,zero3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    assert "unknown layout 'zero3'" in proc.stderr


def test_fsdp_gpu_sh_without_two_gpus_says_so(tmp_path: Path) -> None:
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs here: fsdp_gpu.sh would measure (the GPU script's job)")
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "fsdp_gpu.sh"), "30"],
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable},
        timeout=120,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("fsdp_gpu.sh: ") and ("no CUDA device" in line or "at least 2" in line)
    assert not (tmp_path / "strategies.json").exists()
