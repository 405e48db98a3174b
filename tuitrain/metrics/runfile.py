"""One run file contract for every reader: which file a target names, how a line becomes a
record, and what a run's records say about it. No torch, no Textual: `watch`, `watch
--compare`, `runs`, `gate`, `export` and `tuitrain run` all read through here.

Targets (`metrics_path`, `run_target`, `find_runs`): a run dir (its metrics.jsonl, rank 0's
for a DDP run), a metrics file (itself, whatever its name), or a parent folder of runs (each
child folder holding a metrics.jsonl file). A missing path without a suffix is a run dir
still to be written; one with a suffix is the file itself.

Lines (`parse_line`, `classify_line`): a line longer than MAX_LINE_BYTES (the header's limit,
MAX_HEADER_BYTES, above any other record's MAX_RECORD_BYTES: every reader reads at least
what the contract lets a writer write) is skipped unread; a line that is not a JSON object
with a text "type" is skipped; a train or eval record whose step lies outside 0..STEP_MAX is
skipped; every other record comes back through `records.clean_record` (fields of the wrong
type left out). A last line without its newline is still being written (or was cut): no
reader takes it.

Status (`run_status`, `silent_after_s`): the end record's status (completed, failed,
stopped); without one, crashed when the run dir's lock file is there and no process holds it
(`writer_gone`) and nothing was written after the file was read; silent when the file has
been still longer than max(SILENT_FLOOR_S, SILENT_INTERVALS log intervals), the log interval
being the last train record's step_time_s x the header's train.log_every, or SILENT_UNKNOWN_S
where either is unknown (a script's run through the client); else running.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

from tuitrain.core.errors import UserError
from tuitrain.core.rundir import LOCK_NAME, writer_gone  # torch-free: flock only
from tuitrain.core.safefile import NotRegular, open_regular
from tuitrain.metrics.records import (
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    clean_record,
    task_declaration,
    valid_step,
)

__all__ = [
    "LOCK_NAME",
    "MAX_LINE_BYTES",
    "METRICS_NAME",
    "RUN_FILES",
    "LineTail",
    "RunSummary",
    "RunTargetError",
    "classify_line",
    "find_runs",
    "has_run_files",
    "last_records",
    "log_interval_s",
    "metrics_path",
    "parse_line",
    "parse_lines",
    "quiet_seconds",
    "output_tail",
    "read_records",
    "read_tail",
    "run_end",
    "run_status",
    "run_target",
    "silent_after_s",
    "step_in_range",
    "summarize_run",
    "writer_gone",
]

METRICS_NAME = "metrics.jsonl"
RUN_FILES = (METRICS_NAME, "config.toml", "train.log")  # what a run dir holds early on
MAX_LINE_BYTES = max(MAX_HEADER_BYTES, MAX_RECORD_BYTES)  # a longer line is no record

SILENT_FLOOR_S = 120.0  # a run without an end record this quiet may have died ...
SILENT_INTERVALS = 10  # ... or this many of its own log intervals, whichever is longer
SILENT_UNKNOWN_S = 600.0  # ... or this long where its log interval is unknown

TAIL_BYTES = 32 * 1024  # a summary reads this much of the end first: ~a hundred records
TAIL_MAX_BYTES = 4 * MAX_RECORD_BYTES  # extended backwards (doubling) up to this


# --------------------------------------------------------------------------- targets


class RunTargetError(UserError):
    """A target that names no run: one sentence naming it and the fix (exit 2)."""


def metrics_path(target: str | Path) -> Path:
    """The metrics file a target names: an existing file is itself, a folder its
    metrics.jsonl; a missing path without a suffix is a run dir still to be written."""
    path = Path(target).expanduser()
    if path.is_file():
        return path
    return path / METRICS_NAME if path.is_dir() or not path.suffix else path


def run_target(target: str | Path) -> Path:
    """The metrics file of an existing run, or RunTargetError (`export`, `gate`)."""
    given = Path(target).expanduser()
    if not given.exists():
        raise RunTargetError(
            f"{target} does not exist: no run there; pass a run dir or its metrics.jsonl."
        )
    path = metrics_path(given)
    if given.is_dir() and not path.is_file():
        raise RunTargetError(
            f"{target} is not a run dir: no run there (no metrics.jsonl file); pass the "
            "--run-dir of a run, or its metrics.jsonl."
        )
    return path


def has_run_files(folder: Path) -> bool:
    """True for a folder holding a run's first files (a run starting up)."""
    return folder.is_dir() and any((folder / name).exists() for name in RUN_FILES)


def find_runs(folder: Path) -> list[Path]:
    """The run dirs directly under `folder` (each holds a metrics.jsonl file)."""
    return [
        child for child in folder.iterdir() if child.is_dir() and (child / METRICS_NAME).is_file()
    ]


# --------------------------------------------------------------------------- lines


def step_in_range(rec: Mapping[str, Any]) -> bool:
    """False for a train or eval record whose step is there but outside the contract's
    range (0..STEP_MAX, an integer); a record without a step keeps its meaning."""
    step = rec.get("step")
    return rec.get("type") not in ("train", "eval") or step is None or valid_step(step)


def classify_line(line: bytes, clean: bool = True) -> tuple[dict[str, Any] | None, str]:
    """(record, "") for a line that holds one, else (None, why): "blank", "too-long",
    "bad" (not JSON, not an object, no text type) or "off-range" (a step no axis holds).
    `clean=False` (a writer's round trip) keeps every field as written."""
    if len(line) > MAX_LINE_BYTES:
        return None, "too-long"
    if not line.strip():
        return None, "blank"
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):  # torn, garbled, not UTF-8, nested too deep
        return None, "bad"
    if not isinstance(raw, dict):
        return None, "bad"
    if not step_in_range(raw):
        return None, "off-range"
    if not clean:
        return (raw, "") if isinstance(raw.get("type"), str) else (None, "bad")
    rec = clean_record(raw)
    return (rec, "") if rec is not None else (None, "bad")


def parse_line(line: bytes) -> dict[str, Any] | None:
    """The record of one line (without its newline), or None (see classify_line)."""
    return classify_line(line)[0]


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The records of the lines in `data` (the last one too: pass complete lines)."""
    return [rec for line in data.split(b"\n") if (rec := parse_line(line)) is not None]


def read_records(path: str | Path, clean: bool = True) -> Iterator[dict[str, Any]]:
    """Every record of a metrics file, one line at a time (memory stays flat); a special
    file is refused (NotRegular); a last line without its newline is left out."""
    with open_regular(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                return  # still being written, or cut
            if (rec := classify_line(line[:-1], clean)[0]) is not None:
                yield rec


class LineTail:
    """New whole lines of a growing metrics file, as records, at most `chunk` bytes a call.
    Never waits on a FIFO there; a line longer than MAX_LINE_BYTES is skipped, not held."""

    def __init__(self, path: Path, chunk: int = 1 << 20) -> None:
        self.path, self.chunk, self.offset, self.rest = path, chunk, 0, b""
        self.skipping = False  # inside a line too long to be a record

    def read(self) -> list[dict[str, Any]]:
        fd = _open_fd(self.path)
        if fd is None:
            return []
        try:
            data = os.pread(fd, self.chunk, self.offset)
        except OSError:
            return []
        finally:
            os.close(fd)
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        if self.skipping and lines:
            lines[0], self.skipping = b"", False
        if len(self.rest) > MAX_LINE_BYTES + 1:
            self.rest, self.skipping = b"", True
        return [rec for line in lines if (rec := parse_line(line)) is not None]


def _open_fd(path: Path) -> int | None:
    """A read-only descriptor of a regular file (a link is not followed, a FIFO never
    waited on), else None (missing, special, unreadable)."""
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def last_records(metrics: Path, chunk: int = 1 << 20) -> tuple[dict[str, Any] | None, int | None]:
    """(the last record of metrics.jsonl, the step of the last record that has one), read
    backwards a chunk at a time until both are known (bounded memory, whatever the size)."""
    fd = _open_fd(metrics)
    if fd is None:
        return None, None
    last: dict[str, Any] | None = None
    step: int | None = None
    try:
        pos, carry, drop_tail = os.fstat(fd).st_size, b"", False
        while pos > 0 and (last is None or step is None):
            start = max(0, pos - chunk)
            data = os.pread(fd, pos - start, start)
            if not data:
                break
            lines = (data + carry).split(b"\n")
            if drop_tail:  # the end of a line too long to be a record
                lines[-1], drop_tail = b"", False
            carry = lines.pop(0) if start > 0 else b""
            if len(carry) > MAX_LINE_BYTES + 1:
                carry, drop_tail = b"", True
            for line in reversed(lines):
                record = parse_line(line)
                if record is None:
                    continue
                if last is None:
                    last = record
                if (
                    step is None
                    and record.get("type") != "header"
                    and valid_step(record.get("step"))
                ):
                    step = int(record["step"])
                if step is not None:
                    break
            pos = start
    except OSError:
        pass
    finally:
        os.close(fd)
    return last, step


def read_tail(f: BinaryIO, begin: int, size: int) -> list[dict[str, Any]]:
    """The complete records at the end of the file, after byte `begin` (the header's end):
    the last TAIL_BYTES, and where they hold no train or eval record (lines of up to
    MAX_RECORD_BYTES: a thousand per-layer norms a call), twice as much, and so on up to
    TAIL_MAX_BYTES. A line cut by the start of the read is left out."""
    span = TAIL_BYTES
    while True:
        start = max(size - span, begin)
        f.seek(max(start - 1, begin))
        data = f.read(size - max(start - 1, begin))
        if start > begin:  # the byte before `start` ends a line, or the first line is cut
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        cut = data.rfind(b"\n")
        records = parse_lines(data[: cut + 1])  # a last line without its newline: left out
        if start == begin or span >= TAIL_MAX_BYTES:
            return records
        if any(r.get("type") in ("train", "eval") for r in records):
            return records
        span *= 2


# --------------------------------------------------------------------------- status


def quiet_seconds(path: Path) -> float | None:
    """Seconds since `path` last changed (None when it cannot be read)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return None


def log_interval_s(
    header: Mapping[str, Any] | None, latest: Mapping[str, Any] | None
) -> float | None:
    """The seconds between two log points: the last train record's step_time_s x the
    header's train.log_every; None when either is unknown."""
    config = (header or {}).get("config")
    train = config.get("train") if isinstance(config, Mapping) else None
    log_every = train.get("log_every") if isinstance(train, Mapping) else None
    step_time = (latest or {}).get("step_time_s")
    if not isinstance(log_every, int) or isinstance(log_every, bool) or log_every <= 0:
        return None
    if not isinstance(step_time, (int, float)) or not math.isfinite(step_time) or step_time < 0:
        return None
    return float(step_time) * log_every


def silent_after_s(header: Mapping[str, Any] | None, latest: Mapping[str, Any] | None) -> float:
    """How long a run without an end record may write nothing before it reads silent:
    max(SILENT_FLOOR_S, SILENT_INTERVALS log intervals), SILENT_UNKNOWN_S without one."""
    interval = log_interval_s(header, latest)
    if interval is None:
        return SILENT_UNKNOWN_S
    return max(SILENT_FLOOR_S, SILENT_INTERVALS * interval)


def run_status(
    header: Mapping[str, Any] | None,
    end: Mapping[str, Any] | None,
    latest: Mapping[str, Any] | None,
    quiet_s: float | None,
    writer_exited: bool,
) -> str:
    """completed / failed / stopped (the end record's), crashed (no end record and its
    writer exited: `writer_exited`), silent (see silent_after_s), else running."""
    if end is not None:
        return str(end.get("status") or "stopped")
    if writer_exited:
        return "crashed"
    if quiet_s is not None and quiet_s > silent_after_s(header, latest):
        return "silent"
    return "running"


@dataclass
class RunSummary:
    """One run as `tuitrain runs` lists it."""

    run_dir: str
    name: str
    status: str
    preset: str | None
    task: str | None
    steps: int | None
    best: float | None
    best_metric: str | None
    best_format: str
    samples_per_s: float | None
    tokens_per_s: float | None
    duration_s: float | None
    started: str | None
    best_mode: str = "max"  # the best metric's declared goal: "max" (accuracy) or "min" (loss)
    step_time_s: float | None = None  # median seconds a step: a script's rate where no samples/s

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _head_and_tail(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], int]:
    """(the header record, the tail's records, the file size read); (None, [], 0) when the
    first line is no header within MAX_HEADER_BYTES."""
    with cast(BinaryIO, open_regular(path, "rb")) as f:
        head = f.readline(MAX_HEADER_BYTES + 1)
        if not head.endswith(b"\n"):
            return None, [], 0  # no complete first line within the limit: no header
        size = f.seek(0, 2)
        tail = read_tail(f, len(head), size)
    header = parse_line(head[:-1])
    if header is None or header.get("type") != "header":
        return None, [], 0
    return header, tail, size


def summarize_run(run_dir: Path) -> RunSummary | None:
    """One run from its header (up to MAX_HEADER_BYTES) and its tail, never the whole
    file; None when the folder holds no run."""
    path = run_dir / METRICS_NAME
    for _ in range(3):
        try:
            header, tail, size = _head_and_tail(path)
        except (OSError, NotRegular):
            return None
        if header is None:
            return None
        end = next((r for r in reversed(tail) if r.get("type") == "end"), None)
        exited = end is None and writer_gone(run_dir)
        try:
            grew = exited and path.stat().st_size != size  # it wrote (its end?) as it exited
        except OSError:
            grew = False
        if not grew:
            break
    assert header is not None
    trains = [r for r in tail if r.get("type") == "train"]
    evals = [r for r in tail if r.get("type") == "eval"]
    status = run_status(header, end, trains[-1] if trains else None, quiet_seconds(path), exited)
    task = task_declaration(header)
    key = task["primary"] or "val_loss"
    fmt = next((m["format"] for m in task["metrics"] if m["name"] == key), "float")
    values = [r[key] for r in evals if _finite(r.get(key))]
    if end is not None and _finite(end.get(key)):
        values.append(end[key])
    best = (max(values) if task["mode"] == "max" else min(values)) if values else None
    steps = [r.get("step") for r in [*trains, *evals, *([end] if end else [])]]
    steps = [s for s in steps if valid_step(s)]
    duration = end.get("elapsed_s") if end is not None and _finite(end.get("elapsed_s")) else None
    started = header.get("time") if isinstance(header.get("time"), str) else None
    if duration is None and started:
        try:
            then = datetime.fromisoformat(started)
            duration = max(path.stat().st_mtime - then.timestamp(), 0.0)
        except (ValueError, OSError):
            duration = None
    return RunSummary(
        run_dir=str(run_dir),
        name=run_dir.name,
        status=status,
        preset=str(header["preset"]) if header.get("preset") is not None else None,
        task=task["name"] if isinstance(header.get("task"), dict) else "classify",
        steps=max(steps) if steps else None,
        best=best,
        best_metric=key if best is not None else None,
        best_format=fmt,
        samples_per_s=_median([r.get("samples_per_s") for r in trains]),
        tokens_per_s=_median([r.get("tokens_per_s") for r in trains]),
        duration_s=float(duration) if duration is not None else None,
        started=started,
        best_mode="max" if task["mode"] == "max" else "min",
        step_time_s=_median([r.get("step_time_s") for r in trains]),
    )


def run_end(run_dir: Path) -> dict[str, Any] | None:
    """The end record of a run (its header and tail read, never the whole file), or None:
    no end record yet, or no run there."""
    try:
        header, tail, _ = _head_and_tail(run_dir / METRICS_NAME)
    except (OSError, NotRegular):
        return None
    if header is None:
        return None
    return next((r for r in reversed(tail) if r.get("type") == "end"), None)


OUTPUT_NAME = "output.log"  # what `tuitrain run`'s script printed, whole
OUTPUT_TAIL_BYTES = 64 * 1024


def output_tail(run_dir: Path, max_bytes: int = OUTPUT_TAIL_BYTES) -> list[str]:
    """The last lines of a script's output.log (at most `max_bytes` read from its end, the
    first line cut by the read left out), decoded leniently; [] without one."""
    fd = _open_fd(run_dir / OUTPUT_NAME)
    if fd is None:
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        data = os.pread(fd, size - start, start)
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if start > 0 and lines else lines


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if _finite(v)]
    return statistics.median(numbers) if numbers else None
