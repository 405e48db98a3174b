"""The contract's step range (0..STEP_MAX, an integer) in every reader: a record whose step
is outside it (negative, past int64, 10**400, a fraction, a bool, text) is left out whole by
the store, `watch`'s follower and `export`; it neither crashes them nor lands on the x axis."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from tuitrain.commands.export import Reading, main
from tuitrain.metrics.records import STEP_MAX
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower

BAD_STEPS = [-1, -(2**63), STEP_MAX + 1, 2**64, 10**400, 2.5, 3.0, True, "7", [1]]
IDS = ["-1", "-2^63", "2^63", "2^64", "10^400", "2.5", "3.0", "True", "text", "list"]


def records(bad: object) -> list[dict]:
    """Good train and eval records at steps 1..3 and STEP_MAX, and one of each at `bad`."""
    out: list[dict] = [{"type": "header", "preset": "fashion-mini", "config": {}}]
    for step in (1, 2, bad, 3, STEP_MAX):
        out.append({"type": "train", "step": step, "loss": 0.5, "samples_per_s": 10.0})
        out.append({"type": "eval", "step": step, "val_loss": 0.4, "val_acc": 0.9})
    return out


def check_store(store: MetricStore) -> None:
    snap = store.snapshot()
    assert snap.get("loss").xs == (1.0, 2.0, 3.0, float(STEP_MAX))
    assert snap.get("val_acc").xs == (1.0, 2.0, 3.0, float(STEP_MAX))
    assert snap.latest is not None and snap.latest["step"] == STEP_MAX
    assert [e["step"] for e in snap.evals] == [1, 2, 3, STEP_MAX]
    xs, _ = snap.get("loss").decimate(2)
    assert all(math.isfinite(x) and x >= 0 for x in xs)


@pytest.mark.parametrize("bad", BAD_STEPS, ids=IDS)
def test_the_store_leaves_out_a_record_whose_step_is_outside_the_range(bad: object) -> None:
    store = MetricStore()
    for rec in records(bad):
        store.push(rec)
    check_store(store)


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.mark.parametrize("bad", BAD_STEPS, ids=IDS)
def test_watch_leaves_it_out(tmp_path: Path, bad: object) -> None:
    store = MetricStore()
    JsonlFollower(write(tmp_path / "metrics.jsonl", records(bad)), store).poll()
    check_store(store)


@pytest.mark.parametrize("bad", BAD_STEPS, ids=IDS)
def test_export_leaves_it_out_and_says_so(tmp_path: Path, bad: object, capsys) -> None:
    path = write(tmp_path / "metrics.jsonl", records(bad))
    reading = Reading(path)
    steps = [r["step"] for r in reading if r["type"] in ("train", "eval")]
    assert steps == [1, 1, 2, 2, 3, 3, STEP_MAX, STEP_MAX]
    assert any("step outside 0..2^63-1" in note for note in reading.notes)
    out = tmp_path / "out.csv"
    assert main([str(path), "--format", "csv", "--out", str(out)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["step"] for row in rows] == ["1", "1", "2", "2", "3", "3", *[str(STEP_MAX)] * 2]
    assert "2 record(s) with a step outside 0..2^63-1 left out" in capsys.readouterr().err


def test_a_record_without_a_step_keeps_its_old_meaning() -> None:
    """No step (null or absent): the record counts (the latest figures), with no point."""
    store = MetricStore()
    store.push({"type": "train", "step": 1, "loss": 1.0})
    store.push({"type": "train", "step": None, "loss": 9.0})
    snap = store.snapshot()
    assert snap.latest is not None and snap.latest["loss"] == 9.0
    assert snap.get("loss").xs == (1.0,)
