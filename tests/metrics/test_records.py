"""The metric contract's single home: builders, the train record's fields, DDP merge rules."""

from __future__ import annotations

import math

import pytest

from tuitrain.metrics.records import (
    COMM_FIELDS,
    RANK_LISTS,
    RANK_MERGE,
    TELEMETRY_FIELDS,
    TRAIN_EXTRA_FIELDS,
    TRAIN_FIELDS,
    end_record,
    event_record,
    record_time,
    train_record,
)

VALUES = dict(
    step=10, epoch=0.123456, samples=2560, loss=0.5, lr=1e-3, samples_per_s=1000.0,
    step_time_s=0.25, data_wait_s=0.01, data_wait_frac=0.004, grad_scale=None,
    skipped_steps=None, grad_norm=None,
)  # fmt: skip


def test_train_record_has_every_field_in_order() -> None:
    record = train_record(**VALUES, telemetry={"host_rss_bytes": 123})
    assert tuple(record) == TRAIN_FIELDS and list(record)[0] == "type"
    assert record["type"] == "train" and record["epoch"] == 0.1235
    assert record["host_rss_bytes"] == 123 and record["mem_alloc_bytes"] is None  # null
    assert train_record(**{**VALUES, "loss": math.nan}, telemetry={})["loss"] is None
    with pytest.raises(ValueError, match="outside the contract"):
        train_record(**VALUES, telemetry={"gpu_temp_c": 60})


def test_ddp_merges_only_contract_fields() -> None:
    assert set(RANK_MERGE) - {"busy_s"} <= set(TRAIN_FIELDS) | set(COMM_FIELDS)
    assert set(RANK_LISTS) <= set(RANK_MERGE) and set(RANK_LISTS.values()) <= set(
        TRAIN_EXTRA_FIELDS
    )
    assert set(RANK_MERGE.values()) <= {"sum", "mean", "max", "per-rank"}
    assert set(TELEMETRY_FIELDS) <= set(TRAIN_FIELDS)


def test_event_and_end_builders() -> None:
    event = event_record("paused at step 3", kind="pause", step=3)
    assert list(event)[0] == "type" and event["level"] == "info" and event["step"] == 3
    end = end_record("stopped", "stopped by SIGTERM", 7, samples=1792)
    assert record_time(end) is not None and record_time(event) is not None
    end.pop("time")
    assert end == {
        "type": "end", "status": "stopped", "reason": "stopped by SIGTERM", "step": 7,
        "samples": 1792,
    }  # fmt: skip


def test_the_engine_writes_records_of_the_contract(tiny_config) -> None:
    from tuitrain.engine.runner import run
    from tuitrain.metrics.sinks import Sink

    class Keep(Sink):
        def __init__(self) -> None:
            self.records: list[dict] = []

        def write(self, record) -> None:  # type: ignore[no-untyped-def]
            self.records.append(dict(record))

    sink = Keep()
    run(tiny_config("train.max_steps=4"), sink)
    train = [r for r in sink.records if r["type"] == "train"]
    assert train and all(tuple(r)[: len(TRAIN_FIELDS)] == TRAIN_FIELDS for r in train)
    assert sink.records[-1]["type"] == "end" and sink.records[0]["type"] == "header"


def test_every_built_record_carries_wall_clock_time_and_old_runs_read_without() -> None:
    from datetime import UTC, datetime

    from tuitrain.metrics.records import clean_record, eval_record, script_train_record

    before = datetime.now(UTC).replace(microsecond=0)
    built = [
        train_record(**VALUES, telemetry={}),
        script_train_record(3, {"loss": 1.0}),
        eval_record(3, {"acc": 0.5}),
        event_record("m"),
        end_record("completed", "done", 3),
    ]
    for rec in built:
        assert list(rec)[:2] == ["type", "time"]
        when = record_time(rec)
        assert when is not None and before <= when <= datetime.now(UTC)
        assert clean_record(rec) == rec  # a reader keeps it
    assert record_time({"type": "train", "step": 1}) is None  # an older run's record
    assert record_time({"type": "train", "time": 12}) is None
    assert record_time({"type": "train", "time": "2026-12-04T18:52:43"}).tzinfo is not None
