"""The one run-file contract: targets, the line reader, the silence rule and the status,
the terminal check every command makes, the one hook runner."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tuitrain.commands.export import csv_columns
from tuitrain.core.hooks import run_hook
from tuitrain.host.stdio import can_draw_ui
from tuitrain.metrics.format import format_eval_line
from tuitrain.metrics.records import MAX_HEADER_BYTES, STEP_MAX
from tuitrain.rundir.lock import RunDirLock
from tuitrain.rundir.read import (
    LineTail,
    RunTargetError,
    classify_line,
    find_runs,
    metrics_path,
    read_records,
    run_target,
)
from tuitrain.rundir.state import SILENT_FLOOR_S, SILENT_UNKNOWN_S, run_status, silent_after_s
from tuitrain.rundir.summary import summarize_run

LM = {
    "name": "charlm",
    "primary": "val_loss",
    "mode": "min",
    "tokens": True,
    "metrics": [
        {"name": "val_loss", "split": "val", "goal": "min", "format": "float"},
        {"name": "val_bpc", "split": "val", "goal": "min", "format": "float"},
    ],
}


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_targets_resolve_one_way(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write(run / "metrics.jsonl", [{"type": "header"}])
    other = write(tmp_path / "named-anything", [{"type": "header"}])
    assert metrics_path(run) == run / "metrics.jsonl"
    assert metrics_path(run / "metrics.jsonl") == run / "metrics.jsonl"
    assert metrics_path(other) == other  # an existing file is itself, whatever its name
    assert metrics_path(tmp_path / "later") == tmp_path / "later" / "metrics.jsonl"
    assert metrics_path(tmp_path / "x.jsonl") == tmp_path / "x.jsonl"
    assert run_target(run) == run / "metrics.jsonl"
    with pytest.raises(RunTargetError, match="does not exist"):
        run_target(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunTargetError, match="is not a run dir"):
        run_target(tmp_path / "empty")
    assert find_runs(tmp_path) == [run]


def test_one_line_rule(tmp_path: Path) -> None:
    assert classify_line(b'{"type": "train", "step": 3, "loss": "x"}') == (
        {"type": "train", "step": 3},  # cleaned: a loss that is no number is left out
        "",
    )
    assert classify_line(b"") == (None, "blank")
    assert classify_line(b"[1]")[1] == "bad" and classify_line(b'{"a": 1}')[1] == "bad"
    assert classify_line(b"{" * 100_000)[1] == "bad"  # nested too deep
    step = json.dumps({"type": "eval", "step": STEP_MAX + 1}).encode()
    assert classify_line(step)[1] == "off-range"
    big = json.dumps({"type": "event", "message": "x" * (MAX_HEADER_BYTES + 10)}).encode()
    assert classify_line(big)[1] == "too-long"
    path = write(tmp_path / "m.jsonl", [{"type": "header"}, {"type": "train", "step": 1}],
                 tail='{"type": "train", "st')  # fmt: skip
    assert [r["type"] for r in read_records(path)] == ["header", "train"]  # torn line out


def test_line_tail_skips_a_line_longer_than_any_record(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    tail = LineTail(path, chunk=64 * 1024)
    assert tail.read() == []  # not there yet
    huge = json.dumps({"type": "event", "message": "x" * (MAX_HEADER_BYTES + 100)})
    write(path, [{"type": "header"}, json.loads(huge), {"type": "train", "step": 2}])
    got = []
    for _ in range(40):
        got += tail.read()
    assert [r["type"] for r in got] == ["header", "train"]
    assert len(tail.rest) <= MAX_HEADER_BYTES + 1


def test_the_silence_rule() -> None:
    header = {"type": "header", "config": {"train": {"log_every": 10}}}
    assert silent_after_s(header, {"step_time_s": 0.1}) == SILENT_FLOOR_S  # 1 s interval
    assert silent_after_s(header, {"step_time_s": 60.0}) == 10 * 600.0  # 10 intervals
    assert silent_after_s(header, None) == SILENT_UNKNOWN_S  # no step time yet
    assert silent_after_s({"type": "header"}, {"step_time_s": 0.1}) == SILENT_UNKNOWN_S
    assert run_status(header, None, {"step_time_s": 0.1}, 121.0, False) == "silent"
    assert run_status({"type": "header"}, None, None, 121.0, False) == "running"
    assert run_status({"type": "header"}, None, None, 601.0, False) == "silent"
    assert run_status(header, None, None, 0.0, True) == "crashed"
    assert run_status(header, {"status": "failed"}, None, 10**6, True) == "failed"


def test_a_summary_by_the_declaration(tmp_path: Path) -> None:
    run = tmp_path / "lm"
    write(run / "metrics.jsonl", [
        {"type": "header", "task": LM, "time": "2026-12-03T10:00:00+00:00"},
        {"type": "train", "step": 20, "samples_per_s": 230.0, "tokens_per_s": 29_500.0},
        {"type": "eval", "step": 20, "val_loss": 2.1},
        {"type": "eval", "step": 40, "val_loss": 1.9},
    ])  # fmt: skip
    RunDirLock(run).release()  # its writer exited without an end record
    row = summarize_run(run)
    assert row is not None and row.status == "crashed"
    assert (row.best, row.best_metric, row.steps, row.task) == (1.9, "val_loss", 40, "charlm")
    lock = RunDirLock(run)
    try:
        os.utime(run / "metrics.jsonl", (time.time() - 700, time.time() - 700))
        assert summarize_run(run).status == "silent"  # type: ignore[union-attr]
    finally:
        lock.release()


def test_columns_and_lines_come_from_the_declaration() -> None:
    columns = csv_columns({"type": "header", "task": LM})
    assert "val_acc" not in columns and columns[-3:] == ("tokens_per_s", "val_loss", "val_bpc")
    assert csv_columns({"type": "header"})[-2:] == ("val_loss", "val_acc")  # an old header
    pct = {**LM, "metrics": [{"name": "val_top1", "split": "val", "format": "pct"}]}
    line = format_eval_line({"type": "eval", "step": 1, "val_loss": 0.5, "val_top1": 0.5},
                            {"type": "header", "task": pct})  # fmt: skip
    assert line.endswith("val_loss 0.5000 | val_top1 50.00%")
    old = format_eval_line({"type": "eval", "step": 1, "val_loss": 0.5, "val_acc": 0.8531})
    assert old.endswith("val_acc 85.31%")


def test_one_terminal_check(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    for name in ("stdin", "stdout", "stderr"):
        monkeypatch.setattr(sys, name, Tty())
    monkeypatch.setenv("TERM", "xterm-256color")
    assert can_draw_ui() is None
    monkeypatch.setenv("TERM", "dumb")
    assert can_draw_ui() == "TERM=dumb cannot draw the dashboard"
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(sys, "stdout", open(os.devnull, "w"))  # noqa: SIM115
    assert can_draw_ui() == "no terminal (stdout is not a TTY)"
    assert can_draw_ui(stdout=False) is None  # watch draws on stderr
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    assert can_draw_ui() is None  # textual serve's driver needs no terminal


def test_one_hook_runner(tmp_path: Path) -> None:
    out = tmp_path / "alert.json"
    assert run_hook(f"cat > {out}", json.dumps({"alert": "x"}), 10) == ""
    assert json.loads(out.read_text()) == {"alert": "x"}
    assert run_hook("echo nope >&2; exit 3", "{}", 10) == "exit code 3 nope"
    pid_file = tmp_path / "pid"
    why = run_hook(f"sleep 300 & echo $! > {pid_file}; wait", "{}", 0.5)
    assert why == "still running after 0.5 s: killed, with everything it started"
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the hook's child outlived it")
