"""Time in collectives on two real ranks (gloo, CPU): every train record of a DDP and of an
FSDP run says how much of the step was communication, per rank, with each rank's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_fsdp import FSDP, torchrun, trains


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_every_train_record_says_its_time_in_collectives(tmp_path: Path, strategy: str) -> None:
    torchrun(tmp_path, "--max-steps", "6", *(FSDP if strategy == "fsdp" else []))
    records = trains(tmp_path)
    assert len(records) == 3
    for rec in records:
        assert rec["comm_s"] > 0 and 0 < rec["comm_frac"] <= 1
        assert len(rec["rank_comm_frac"]) == 2 and max(rec["rank_comm_frac"]) == rec["comm_frac"]
        assert len(rec["rank_host_rss_bytes"]) == 2 and min(rec["rank_host_rss_bytes"]) > 0
        assert "rank_mem_peak_bytes" not in rec and "rank_node" not in rec  # CPU, one node
        if strategy == "ddp":  # the part after the backward's last bucket call
            assert 0 <= rec["comm_exposed_s"] <= rec["comm_s"]
            assert len(rec["rank_comm_exposed_frac"]) == 2
        else:  # FSDP: not measured
            assert rec["comm_exposed_s"] is None and "rank_comm_exposed_frac" not in rec
