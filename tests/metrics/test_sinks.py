"""Tests for tuitrain.metrics.sinks and format: JSONL, console output, fan-out."""

from __future__ import annotations

import io
import json
import re
import threading
from datetime import datetime
from pathlib import Path

import pytest

from tuitrain.metrics import (
    ConsoleSink,
    FanOutSink,
    JsonlSink,
    MetricStore,
    NullSink,
    Sink,
    StoreSink,
    format_eval_line,
    format_train_line,
    human_bytes,
)
from tuitrain.rundir.read import read_jsonl

HEADER = {
    "type": "header",
    "preset": "mnist-mlp",
    "config": {"lr": 0.001, "layers": [784, 128, 10], "opt": {"name": "adamw"}},
    "device": "cuda:0",
    "device_name": "NVIDIA H200",
    "precision": "bf16",
    "compile": False,
    "world_size": 1,
    "torch": "2.5.0",
    "tuitrain": "0.1.0",
    "python": "3.11.7",
    "time": "2025-01-01T00:00:00Z",
}

TRAIN = {
    "type": "train",
    "step": 120,
    "epoch": 0.5123,
    "samples": 7680,
    "loss": 0.51234,
    "lr": 0.001,
    "samples_per_s": 12345.4,
    "step_time_s": 0.005,
    "data_wait_s": 0.00006,
    "data_wait_frac": 0.012,
    "mem_alloc_bytes": int(1.2 * 1024**3),
    "mem_reserved_bytes": 2 * 1024**3,
    "mem_peak_bytes": int(1.5 * 1024**3),
    "host_rss_bytes": 812 * 1024**2,
    "gpu_util_pct": None,
    "gpu_mem_used_bytes": None,
    "grad_scale": 65536.0,
    "skipped_steps": 0,
    "grad_norm": 1.5,
}

EVAL = {"type": "eval", "step": 234, "epoch": 1.0, "val_loss": 0.40123, "val_acc": 0.85312}


def raw_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_jsonl_round_trip_type_first(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "metrics.jsonl"  # parent directory created
    records = [
        HEADER,
        TRAIN,
        EVAL,
        {"message": "hello", "level": "info", "type": "event"},  # "type" last on purpose
        {"type": "end", "status": "completed", "reason": "max_steps", "step": 234},
    ]
    with JsonlSink(path) as sink:
        for rec in records:
            sink.write(rec)
        # Flushed after each record: a watcher sees every line before close.
        assert len(raw_lines(path)) == len(records)
    lines = raw_lines(path)
    assert all(line.startswith('{"type": ') for line in lines)
    assert list(json.loads(lines[3])) == ["type", "message", "level"]
    # the end record names where its segment's header starts (here, the top of the file)
    assert list(read_jsonl(path)) == records[:-1] + [{**records[-1], "header_at": 0}]


def test_an_end_record_names_its_own_segments_header(tmp_path: Path) -> None:
    """A resumed run's file: the second sink's end record points at the second header, and
    the reader takes the header it names without searching; an end record pointing at no
    header (a planted or damaged value) falls back to the search."""
    from tuitrain.rundir.summary import read_segment, told_header

    path = tmp_path / "metrics.jsonl"
    end = {"type": "end", "status": "completed", "reason": "", "step": 2}
    with JsonlSink(path) as sink:
        sink.write(HEADER)
        sink.write(end)
    first_size = path.stat().st_size
    with JsonlSink(path) as sink:  # the resume
        sink.write({**HEADER, "history": {"segments": 1}})
        sink.write({**TRAIN, "step": 3})
        sink.write({**end, "step": 3})
    last = json.loads(raw_lines(path)[-1])
    assert last["header_at"] == first_size
    with open(path, "rb") as f:
        assert told_header(f, path.stat().st_size) == first_size
    header, tail, _ = read_segment(path) or ({}, [], 0)
    assert header.get("history") == {"segments": 1}
    assert [r["step"] for r in tail if r["type"] == "train"] == [3]
    # a value that names no header: the backwards search still finds the second one
    with open(path, "ab") as f:
        f.write((json.dumps({**end, "header_at": 5}) + "\n").encode())
    header, _, _ = read_segment(path) or ({}, [], 0)
    assert header.get("history") == {"segments": 1}


def test_jsonl_non_finite_floats_become_null(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rec = {
        "type": "train",
        "step": 3,
        "loss": float("nan"),
        "grad_norm": float("inf"),
        "nested": {"x": float("-inf"), "ok": [1.0, float("nan")]},
    }
    sink = JsonlSink(path)
    sink.write(rec)
    sink.close()
    assert rec["loss"] != rec["loss"]  # caller's record untouched (still NaN)
    assert rec["nested"]["ok"][1] != rec["nested"]["ok"][1]  # type: ignore[index]

    def reject(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    line = raw_lines(path)[0]
    parsed = json.loads(line, parse_constant=reject)
    assert parsed["loss"] is None and parsed["grad_norm"] is None
    assert parsed["nested"] == {"x": None, "ok": [1.0, None]}
    assert parsed["step"] == 3


def test_jsonl_unserialisable_values_do_not_raise(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    with JsonlSink(path) as sink:
        sink.write({"type": "header", "config": {"root": Path("/data"), "s": {1}}})
    rec = next(read_jsonl(path))
    assert rec["config"] == {"root": "/data", "s": [1]}


def test_jsonl_appends_and_close_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    first = JsonlSink(path)
    first.write({"type": "train", "step": 1, "loss": 1.0})
    first.close()
    first.close()
    assert first.closed
    first.write({"type": "train", "step": 99})  # ignored after close
    second = JsonlSink(path)  # a resumed run appends
    second.write({"type": "train", "step": 2, "loss": 0.5})
    second.flush()
    second.close()
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]


def test_jsonl_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    sink = JsonlSink(path)

    def writer(tid: int) -> None:
        for i in range(500):
            sink.write({"type": "event", "level": "info", "message": f"{tid}-{i}" * 20})

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    lines = raw_lines(path)
    assert len(lines) == 2000
    assert len({json.loads(line)["message"] for line in lines}) == 2000


def test_read_jsonl_skips_truncated_blank_and_non_object_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"type": "header", "preset": "a"}\n'
        "\n"
        "[1, 2, 3]\n"
        "42\n"
        '{"type": "train", "step": 1, "loss": 0.5}\n'
        '{"type": "train", "step": 2, "lo',  # writer killed mid-line
        encoding="utf-8",
    )
    records = list(read_jsonl(path))
    assert [r["type"] for r in records] == ["header", "train"]
    assert records[1]["step"] == 1


def test_console_train_line_pieces() -> None:
    line = format_train_line(TRAIN)
    assert line.startswith("step   120 | epoch 0.51 | loss 0.5123 |")
    assert "12,345 samples/s" in line
    assert "data wait  1.2%" in line
    assert "mem 1.20 GiB alloc (peak 1.50 GiB)" in line
    assert "scale 65536" in line and "65536.0" not in line
    assert "rss" not in line


def test_console_train_line_cpu_fallbacks() -> None:
    rec = dict(TRAIN, mem_alloc_bytes=None, mem_peak_bytes=None, grad_scale=None)
    line = format_train_line(rec)
    assert "rss 812 MiB" in line
    assert "mem " not in line and "scale" not in line
    minimal = format_train_line({"type": "train", "step": 5, "loss": None})
    assert minimal.startswith("step     5 | loss —")


def untimed(text: str) -> list[str]:
    """The console's lines without the HH:MM:SS each opens with (which they must have)."""
    lines = text.splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines), lines
    return [line[9:] for line in lines]


def test_console_eval_line() -> None:
    assert format_eval_line(EVAL) == "eval  step 234 | epoch 1 | val_loss 0.4012 | val_acc 85.31%"


def test_console_sink_routes_streams() -> None:
    out, err = io.StringIO(), io.StringIO()
    sink = ConsoleSink(out=out, err=err)
    sink.write(HEADER)
    sink.write(TRAIN)
    sink.write(EVAL)
    sink.write({"type": "event", "level": "info", "message": "checkpoint saved"})
    sink.write({"type": "event", "level": "warning", "message": "loss spike", "kind": "spike"})
    sink.write({"type": "event", "level": "error", "message": "NaN loss"})
    sink.write({"type": "end", "status": "failed", "reason": "nan", "step": 240})
    sink.write({"type": "unknown"})
    sink.flush()
    out_lines = untimed(out.getvalue())
    err_lines = untimed(err.getvalue())
    assert len(out_lines) == 5
    header = out_lines[0]
    for piece in ("mnist-mlp", "cuda:0", "NVIDIA H200", "bf16", "compile off", "world_size 1"):
        assert piece in header
    assert out_lines[1].startswith("step   120")
    assert out_lines[2].startswith("eval  step 234")
    assert out_lines[3] == "checkpoint saved"
    assert "failed" in out_lines[4] and "nan" in out_lines[4] and "240" in out_lines[4]
    assert err_lines == ["warning: loss spike", "error: NaN loss"]
    sink.close()
    sink.write(TRAIN)
    assert len(out.getvalue().splitlines()) == 5


def test_console_sink_defaults_to_current_std_streams(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink()
    sink.write({"type": "event", "level": "info", "message": "to stdout"})
    sink.write({"type": "event", "level": "warning", "message": "to stderr"})
    captured = capsys.readouterr()
    assert untimed(captured.out) == ["to stdout"]
    assert untimed(captured.err) == ["warning: to stderr"]


def test_fanout_store_and_null_sinks() -> None:
    class Boom(Sink):
        def write(self, record: dict) -> None:  # type: ignore[override]
            raise OSError("disk full")

    store = MetricStore()
    out = io.StringIO()
    fan = FanOutSink(Boom(), StoreSink(store), ConsoleSink(out=out), NullSink())
    with pytest.raises(OSError, match="disk full"):
        fan.write(TRAIN)
    # The failing sink did not keep the record from the others.
    snap = store.snapshot()
    assert snap.latest is not None and snap.latest["step"] == 120
    assert untimed(out.getvalue())[0].startswith("step   120")
    fan.flush()
    fan.close()


def test_human_bytes() -> None:
    assert human_bytes(None) == "—"
    assert human_bytes(512) == "512 B"
    assert human_bytes(812 * 1024**2) == "812 MiB"
    assert human_bytes(int(1.2 * 1024**3)) == "1.20 GiB"
    assert human_bytes(3 * 1024**4) == "3.00 TiB"


def test_console_gone_silences_the_sink_not_the_run() -> None:
    """A headless run whose terminal hangs up: writes fail with EIO. The console sink goes
    quiet; raising would fail the run ('OSError: Input/output error', exit 1)."""
    import errno

    attempts: list[str] = []

    class HungUp(io.StringIO):
        def write(self, text: str) -> int:
            attempts.append(text)
            raise OSError(errno.EIO, "Input/output error")

        def flush(self) -> None:
            raise OSError(errno.EIO, "Input/output error")

    sink = ConsoleSink(out=HungUp(), err=HungUp())
    record = {"type": "train", "step": 10, "epoch": 0.5, "loss": 0.5, "samples_per_s": 1.0}
    sink.write(record)  # raised before the fix
    sink.write({"type": "event", "level": "error", "message": "boom"})
    sink.flush()
    sink.close()
    assert len(attempts) == 1  # after the first failure the sink stops trying


def test_headless_train_lines_say_step_of_total_and_eta() -> None:
    """Like the dashboard's progress bar: step/total, and the ETA from the median of the last
    five step times (a slow interval does not swing it)."""
    out = io.StringIO()
    sink = ConsoleSink(out=out, err=io.StringIO())
    sink.write({**HEADER, "total_steps": 600})
    for step, step_time in ((100, 0.5), (110, 0.5), (120, 5.0)):
        sink.write({**TRAIN, "step": step, "step_time_s": step_time})
    lines = untimed(out.getvalue())[1:]
    assert lines[0].startswith("step   100/600 |") and lines[0].endswith("| ETA 4:10")
    assert lines[2].startswith("step   120/600 |")
    assert lines[2].endswith("| ETA 4:00")  # median 0.5 s x 480 steps, not 5 s x 480
    assert format_train_line(TRAIN).startswith("step   120 |")  # no header: no total


def test_console_lines_open_with_the_records_wall_clock_time() -> None:
    """A spike or a stall in a headless log can be placed in time: each line opens with the
    record's `time` in local HH:MM:SS; a record of an older writer (no `time`) gets now."""
    out = io.StringIO()
    sink = ConsoleSink(out=out, err=io.StringIO())
    sink.write({**TRAIN, "time": "2026-12-04T18:52:43+00:00"})
    sink.write({"type": "event", "level": "info", "message": "old run", "time": "garbled"})
    first, second = out.getvalue().splitlines()
    local = datetime.fromisoformat("2026-12-04T18:52:43+00:00").astimezone()
    assert first.startswith(local.strftime("%H:%M:%S") + " step   120")
    assert re.fullmatch(r"\d\d:\d\d:\d\d old run", second)
