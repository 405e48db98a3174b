"""`tuitrain runs`: what each run's header and tail say, status of dead writers, the JSON,
the plain table, and the terminal table's keys."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuitrain.engine.rundir import RunDirLock
from tuitrain.runs import list_runs, main


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
