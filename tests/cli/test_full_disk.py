"""A disk that fills under metrics.jsonl: the run goes on and ends with its end record on the
console, the file keeps whole lines only, and a run appended later starts on a fresh line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.metrics.sinks import JsonlSink


@pytest.mark.slow
def test_metrics_file_on_a_full_disk(small_disk: Path) -> None:
    filler = small_disk / "filler"
    with open(filler, "wb") as f:  # leave ~24 KB: the header and a few train records fit
        f.write(b"\0" * (14 * 2**20 - 24 * 2**10))
    run_dir = small_disk / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", "--max-steps", "40", "--log-every", "1",
         "--set", "data.train_samples=256", "--set", "data.val_samples=64",
         "--set", "data.batch_size=32", "--set", "checkpoint.at_epoch_end=false",
         "--set", "checkpoint.on_stop=false", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # the checkpoints could not be written either: the run says so and is not a success
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "no checkpoint was kept" in proc.stderr
    assert "Traceback" not in proc.stderr
    said = [
        line for line in proc.stderr.splitlines() if "metrics.jsonl could not be written" in line
    ]
    assert len(said) == 1 and "No space left on device" in said[0], proc.stderr[-2000:]
    assert "end   failed" in proc.stdout  # the end is still reported
    text = (run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n")
    kept = [json.loads(line) for line in text.splitlines()]  # whole lines only
    assert kept[0]["type"] == "header" and 0 < len(kept) < 40
    # space again: the same file takes the next run's records, each on a line of its own
    filler.unlink()
    sink = JsonlSink(run_dir / "metrics.jsonl")
    sink.write({"type": "event", "message": "resumed"})
    sink.close()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1]) == {"type": "event", "message": "resumed"}


def test_an_appended_run_starts_on_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"type": "header"}\n{"type": "train", "step": 3, "lo')  # killed mid-line
    sink = JsonlSink(path)
    sink.write({"type": "header", "preset": "again"})
    sink.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1]) == {"type": "header", "preset": "again"}  # not glued on
    assert lines[1] == '{"type": "train", "step": 3, "lo'


@pytest.mark.slow
def test_a_run_that_could_keep_no_checkpoint_is_not_a_success(small_disk: Path) -> None:
    """No checkpoint fits: each failure says none is kept (not "the earlier checkpoints are
    intact"), and the run ends failed, exit 1, with one sentence that says why."""
    with open(small_disk / "filler", "wb") as f:  # ~2 MB left: metrics fit, a checkpoint not
        f.write(b"\0" * (12 * 2**20))
    run_dir = small_disk / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", "--max-steps", "8", "--log-every", "4",
         "--set", "data.train_samples=1024", "--set", "data.val_samples=256",
         "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    failed = [r for r in records if r.get("kind") == "checkpoint_failed"]
    assert failed and all("no checkpoint of this run is kept" in r["message"] for r in failed)
    assert not any("intact" in r["message"] for r in failed)
    end = records[-1]
    assert end["type"] == "end" and end["status"] == "failed", end
    assert "no checkpoint was kept" in end["reason"] and "No space left" in end["reason"]
    assert not list((run_dir / "checkpoints").glob("ckpt-*.pt"))
