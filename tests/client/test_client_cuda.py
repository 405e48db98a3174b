"""The client on CUDA: `log` and the flush never make the host wait for the device. Marked
`gpu` and skipped without CUDA (run on a lent GPU machine: `python3 -m pytest -q -m gpu`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tuitrain.client.core import Run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_no_host_sync_between_flushes(tmp_path: Path) -> None:
    run = Run(tmp_path / "run", flush_every=10**9, flush_s=3600.0)
    x = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing call raises from here
    try:
        for step in range(300):
            y = x @ x  # keep the device busy: a sync would have to wait for it
            run.log({"loss": y.mean(), "norm": y.norm(), "lr": 1e-3})
            if step % 100 == 99:
                run._flush()  # stack + non-blocking copy + event: no sync
    finally:
        torch.cuda.set_sync_debug_mode(0)
    run.finish()  # waits for the last copies: the values are all there
    trains = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    trains = [r for r in trains if r["type"] == "train"]
    assert len(trains) == 300 and all(isinstance(r["loss"], float) for r in trains)
    assert trains[-1]["mem_alloc_bytes"] > 0  # the allocator's figures at the flush
