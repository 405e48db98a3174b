"""The merge over ranks of the time in collectives, each rank's memory and node: what the
record keeps as the run's figure (the largest) and as per-rank lists, from synthetic columns
as the engine gathers them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.metrics.test_contract_writers import a_train_record
from tuitrain.metrics.records import (
    COMM_FIELDS,
    NODE_COLUMN,
    TRAIN_FIELDS,
    clean_record,
    merge_ranks,
    rank_merge_fields,
)

DDP_COMM = {"comm_s": 0.02, "comm_exposed_s": 0.01, "comm_frac": 0.2, "comm_exposed_frac": 0.1}
FSDP_COMM = {"comm_s": 0.02, "comm_exposed_s": None, "comm_frac": 0.2, "comm_exposed_frac": None}


def gathered(rec: dict[str, Any], **columns: list[float]) -> dict[str, list[float]]:
    """Two ranks' columns as the engine gathers them: rank 0's value twice (null: NaN),
    then the given ones, and each rank's node."""
    nan = float("nan")
    plan = {f: [nan if rec.get(f) is None else float(rec[f])] * 2 for f in rank_merge_fields(rec)}
    plan[NODE_COLUMN] = [0.0, 0.0]
    return {**plan, **columns}


def test_comm_fields_follow_the_task_metrics_and_merge_to_the_largest() -> None:
    rec = a_train_record(busy_s=0.3, comm=DDP_COMM)
    assert list(rec)[len(TRAIN_FIELDS) :] == [*COMM_FIELDS, "busy_s"]
    columns = gathered(rec, comm_s=[0.02, 0.05], comm_exposed_s=[0.01, 0.0],
                       comm_frac=[0.2, 0.4], comm_exposed_frac=[0.1, 0.0])  # fmt: skip
    merge_ranks(rec, columns)
    assert rec["comm_s"] == 0.05 and rec["comm_exposed_s"] == 0.01  # each the largest
    assert rec["comm_frac"] == 0.4 and rec["comm_exposed_frac"] == 0.1
    assert rec["rank_comm_frac"] == [0.2, 0.4] and rec["rank_comm_exposed_frac"] == [0.1, 0.0]
    assert rec["rank_host_rss_bytes"] == [1000, 1000]
    assert all(isinstance(v, int) for v in rec["rank_host_rss_bytes"])
    assert "rank_mem_peak_bytes" not in rec  # no allocator (CPU): no list, not zeros
    assert NODE_COLUMN not in rec  # one node: no list
    assert clean_record(rec) == rec  # every new field survives a reader's type checks


def test_fsdp_exposed_stays_null_without_a_list() -> None:
    rec = a_train_record(busy_s=0.3, comm=FSDP_COMM)
    merge_ranks(rec, gathered(rec, comm_frac=[0.2, 0.3]))
    assert rec["comm_exposed_s"] is None and rec["comm_exposed_frac"] is None
    assert "rank_comm_exposed_frac" not in rec and rec["rank_comm_frac"] == [0.2, 0.3]


def test_device_peak_per_rank_and_a_rank_without_a_figure() -> None:
    rec = a_train_record(busy_s=0.3, comm=DDP_COMM)
    rec["mem_peak_bytes"] = 2**40 + 1  # a CUDA allocator's peak, to the byte
    columns = gathered(rec, mem_peak_bytes=[2**40 + 1, 2**33], comm_frac=[0.2, float("nan")])
    merge_ranks(rec, columns)
    assert rec["rank_mem_peak_bytes"] == [2**40 + 1, 2**33] and rec["mem_peak_bytes"] == 2**40 + 1
    assert "rank_comm_frac" not in rec  # a rank without the figure: no half-true list


def test_rank_node_only_when_the_job_spans_nodes() -> None:
    rec = a_train_record(busy_s=0.3)
    merge_ranks(rec, gathered(rec, **{NODE_COLUMN: [0.0, 1.0]}))
    assert rec[NODE_COLUMN] == [0, 1] and "comm_s" not in rec  # no comm fields: none merged
    one = a_train_record()
    merge_ranks(one, {"step_time_s": [0.5]})  # one process: nothing per rank but the step
    assert not {NODE_COLUMN, "rank_host_rss_bytes", "rank_comm_frac"} & set(one)


def test_comm_fields_refused_outside_the_contract() -> None:
    with pytest.raises(ValueError, match="comm_total"):
        a_train_record(comm={"comm_total": 1.0})


def test_a_per_rank_list_with_a_rank_not_reported_is_kept_when_read_back() -> None:
    """A script's rank that has not reported yet is null in its lists: read back, the list
    stays (one quiet rank must not hide every rank's figures); a list holding text does not."""
    from tuitrain.metrics.records import clean_record

    rec = clean_record({"type": "train", "rank_step_time_s": [0.2, None], "rank_busy_s": [1, "x"]})
    assert rec is not None and rec["rank_step_time_s"] == [0.2, None]
    assert "rank_busy_s" not in rec
