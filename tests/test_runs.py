"""`tuitrain runs`: what each run's header and tail say, status of dead writers, the JSON,
the plain table, and the terminal table's keys."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tuitrain.commands.runs import list_runs, main, read_row
from tuitrain.metrics.records import MAX_HEADER_BYTES, MAX_RECORD_BYTES, STEP_MAX
from tuitrain.rundir.lock import RunDirLock
from tuitrain.rundir.read import TAIL_MAX_BYTES


def write(run: Path, records: list[dict]) -> Path:
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def header(time: str, **extra: object) -> dict:
    return {"type": "header", "preset": "fashion-mini", "config": {}, "time": time, **extra}


def folder_of_runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    trains = [{"type": "train", "step": s, "loss": 1 / s, "samples_per_s": 100.0 + s}
              for s in range(1, 11)]  # fmt: skip
    write(root / "done", [header("2026-12-01T10:00:00+00:00"), *trains,
                          {"type": "eval", "step": 5, "val_acc": 0.80},
                          {"type": "eval", "step": 10, "val_acc": 0.78},
                          {"type": "end", "status": "completed", "reason": "", "step": 10,
                           "elapsed_s": 75.0}])  # fmt: skip
    write(root / "dead", [header("2026-12-02T10:00:00+00:00"), *trains[:3]])
    RunDirLock(root / "dead").release()  # a writer took the lock, then died: lock file, free
    old = write(root / "old", [header("2026-11-01T10:00:00+00:00"), *trains[:2]])
    os.utime(old / "metrics.jsonl", (1e9, 1e9))  # no lock file, untouched for years
    lm = {"name": "charlm", "primary": "val_loss", "mode": "min", "metrics": []}
    write(root / "lm", [header("2026-12-03T10:00:00+00:00", task=lm, preset="charlm-mini"),
                        {"type": "train", "step": 20, "samples_per_s": 230.0,
                         "tokens_per_s": 29_500.0},
                        {"type": "eval", "step": 20, "val_loss": 2.1},
                        {"type": "eval", "step": 40, "val_loss": 1.9}])  # fmt: skip
    (root / "empty").mkdir()
    write(root / "junk", [{"not": "a record"}])
    return root


def test_each_run_from_its_header_and_tail(tmp_path: Path) -> None:
    root = folder_of_runs(tmp_path)
    lock = RunDirLock(root / "lm")  # a live writer
    try:
        rows = {r.name: r for r in list_runs(root)}
    finally:
        lock.release()
    # newest first; folders without a run left out
    assert list(rows) == ["lm", "dead", "done", "old"]
    assert rows["old"].status == "silent"
    done, dead, lm = rows["done"], rows["dead"], rows["lm"]
    assert done.status == "completed" and done.steps == 10 and done.duration_s == 75.0
    assert done.best == 0.80 and done.best_metric == "val_acc"  # the best, not the last
    assert done.samples_per_s == 105.5
    assert dead.status == "crashed"  # no end record, nobody holds the lock
    assert lm.status == "running" and lm.best == 1.9 and lm.best_metric == "val_loss"
    assert lm.tokens_per_s == 29_500.0 and lm.task == "charlm"


def test_json_and_the_plain_table(tmp_path: Path, capsys) -> None:
    root = folder_of_runs(tmp_path)
    assert main([str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == ["lm", "dead", "done", "old"]
    assert {"run_dir", "status", "samples_per_s", "best"} <= set(data[0])
    assert main([str(root)]) == 0  # no terminal under pytest: the plain table
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["run", "status", "preset"]
    assert "val_acc 80.00%" in out[3] and "29,500 tok/s" in out[1]
    assert main([str(tmp_path / "nowhere")]) == 2


def big_run(run: Path, *, line_bytes: int, header_bytes: int = 0, records: int = 6) -> Path:
    """A client run whose train records are about `line_bytes` long (per-layer norms) and
    whose header's config is about `header_bytes`; the end record is small."""
    config = {"model": {"notes": "x" * header_bytes}} if header_bytes else {}
    head = {**header("2026-12-01T10:00:00+00:00"), "config": config}
    norms = {f"norm/layer{i:04d}": 0.5 for i in range(max(line_bytes // 24, 1))}
    trains = [{"type": "train", "step": s, "loss": 1.0, "samples_per_s": 100.0, **norms}
              for s in range(1, records + 1)]  # fmt: skip
    end = {"type": "end", "status": "completed", "reason": "", "step": records}
    return write(run, [head, *trains, end])


@pytest.mark.parametrize(
    "line_bytes", [100, 30_000, 60_000, 200_000, MAX_RECORD_BYTES - 1_000]
)  # fmt: skip
def test_records_up_to_the_contracts_line_size_are_read(tmp_path: Path, line_bytes: int) -> None:
    run = big_run(tmp_path / "runs" / "r", line_bytes=line_bytes)
    lines = (run / "metrics.jsonl").read_bytes().splitlines()
    assert max(map(len, lines)) <= MAX_RECORD_BYTES  # within the contract
    assert len(lines[1]) >= line_bytes * 0.9
    row = read_row(run)
    assert row is not None and row.status == "completed" and row.steps == 6
    assert row.samples_per_s == 100.0  # train records found though each is big


def test_a_tail_without_records_extends_only_to_its_bound(tmp_path: Path) -> None:
    """Lines beyond the contract (here 3 MB of one record) are not hunted for: the tail
    stops at TAIL_MAX_BYTES and the end record still gives status and steps."""
    huge = {"type": "train", "step": 1, "samples_per_s": 1.0, "blob": "y" * (3 << 20)}
    run = write(tmp_path / "r", [header("2026-12-01T10:00:00+00:00"), huge,
                                 {"type": "end", "status": "completed", "step": 1}])  # fmt: skip
    row = read_row(run)
    assert row is not None and row.status == "completed" and row.steps == 1
    assert row.samples_per_s is None  # the 3 MB record is past the bound
    assert TAIL_MAX_BYTES < 3 << 20


@pytest.mark.parametrize("header_bytes", [1_000, 300_000, MAX_HEADER_BYTES - 10_000])
def test_a_header_up_to_the_contracts_size_is_read(tmp_path: Path, header_bytes: int) -> None:
    run = big_run(tmp_path / "runs" / "r", line_bytes=100, header_bytes=header_bytes)
    assert len((run / "metrics.jsonl").read_bytes().split(b"\n")[0]) <= MAX_HEADER_BYTES
    assert [r.name for r in list_runs(tmp_path / "runs")] == ["r"]
    row = read_row(run)
    assert row is not None and row.preset == "fashion-mini" and row.steps == 6


def test_a_first_line_beyond_the_header_limit_is_no_run(tmp_path: Path) -> None:
    run = big_run(tmp_path / "runs" / "r", line_bytes=100, header_bytes=MAX_HEADER_BYTES + 10)
    assert read_row(run) is None


@pytest.mark.parametrize("bad", [-1, -(2**63), STEP_MAX + 1, 2**64, 10**30, 2.5, True])
def test_steps_outside_the_contracts_range_are_not_counted(tmp_path: Path, bad: object) -> None:
    start = header("2026-12-01T10:00:00+00:00")
    late = {"type": "train", "step": bad, "samples_per_s": 10.0}
    row = read_row(write(tmp_path / "r", [start, late]))
    assert row is not None and row.steps is None  # no step a reader can place
    trains = [{"type": "train", "step": s, "samples_per_s": 10.0} for s in (1, 2, 3)]
    row = read_row(write(tmp_path / "r3", [start, *trains, late]))
    assert row is not None and row.steps == 3
    top = {"type": "train", "step": STEP_MAX, "samples_per_s": 10.0}
    row = read_row(write(tmp_path / "top", [start, *trains, top]))
    assert row is not None and row.steps == STEP_MAX  # the largest step is fine


def test_a_script_run_is_listed_with_its_steps_per_second(tmp_path: Path) -> None:
    """A script's run has no samples/s: the table shows its steps/s (from step_time_s)
    rather than a dash; a run with samples/s keeps showing those."""
    from tuitrain.rundir.summary import rate_text

    run = write(
        tmp_path / "script",
        [
            header("2026-12-04T10:00:00+00:00", preset="s", task="script"),
            *({"type": "train", "step": s, "loss": 1.0, "step_time_s": 0.25} for s in range(5)),
        ],
    )
    row = read_row(run)
    assert row is not None and row.step_time_s == 0.25
    assert rate_text(row) == "4.000 steps/s"
    engine = write(
        tmp_path / "engine",
        [
            header("2026-12-04T10:00:00+00:00", preset="e"),
            {"type": "train", "step": 1, "loss": 1.0, "samples_per_s": 1234.0, "step_time_s": 0.2},
        ],
    )
    assert rate_text(read_row(engine)) == "1,234/s"
