"""The one reader of a run's files: which file a target names, how a line becomes a record,
a file's records, its new lines, its last records and its tail. No torch, no Textual: every
command and screen reads a run through here (and `rundir.follow`, `rundir.summary`).

Targets (`metrics_path`, `run_target`, `existing_metrics`, `find_runs`): a run dir (its
metrics file, rank 0's for a DDP run), a metrics file (itself, whatever its name), or a
parent folder of runs (each child folder holding a metrics file). A missing path without a
suffix is a run dir still to be written; one with a suffix is the file itself. `head_state`
tells a metrics file from another file by its first line.

Lines (`parse_line`, `classify_line`): a line longer than MAX_LINE_BYTES (the header's limit,
MAX_HEADER_BYTES, above any other record's MAX_RECORD_BYTES: every reader reads at least
what the contract lets a writer write) is skipped unread; a line that is not a JSON object
with a text "type" is skipped; a train or eval record whose step lies outside 0..STEP_MAX is
skipped; every other record comes back through `records.clean_record` (fields of the wrong
type left out). A last line without its newline is still being written (or was cut): no
reader takes it. `Reading` streams a whole file's records and says what it left out.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from tuitrain.core.errors import UserError
from tuitrain.core.safefile import open_regular, regular_or_missing
from tuitrain.core.text import strip_controls
from tuitrain.metrics.records import (
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    clean_record,
    valid_step,
)
from tuitrain.rundir.layout import CKPT_DIR, METRICS_NAME, RUN_FILES, RunDir

MAX_LINE_BYTES = max(MAX_HEADER_BYTES, MAX_RECORD_BYTES)  # a longer line is no record
TAIL_BYTES = 32 * 1024  # a summary reads this much of the end first: ~a hundred records
TAIL_MAX_BYTES = 4 * MAX_RECORD_BYTES  # extended backwards (doubling) up to this
PROBE_BYTES = 1 << 20  # head_state: more than this without a newline is no metrics file
CHECKPOINT = re.compile(r"^ckpt-step\d{8}\.(pt|dcp)$")  # a whole file or a sharded folder


# --------------------------------------------------------------------------- targets


class RunTargetError(UserError):
    """A target that names no run: one sentence naming it and the fix (exit 2)."""


def metrics_path(target: str | Path) -> Path:
    """The metrics file a target names: an existing file is itself, a folder its metrics
    file; a missing path without a suffix is a run dir still to be written."""
    path = Path(target).expanduser()
    if path.is_file():
        return path
    return RunDir(path).metrics if path.is_dir() or not path.suffix else path


def run_target(target: str | Path) -> Path:
    """The metrics file of an existing run, or RunTargetError (`export`, `gate`)."""
    given = Path(target).expanduser()
    if not given.exists():
        raise RunTargetError(
            f"{target} does not exist: no run there; pass a run dir or its {METRICS_NAME}."
        )
    path = metrics_path(given)
    if given.is_dir() and not path.is_file():
        raise RunTargetError(
            f"{target} is not a run dir: no run there (no {METRICS_NAME} file); pass the "
            f"--run-dir of a run, or its {METRICS_NAME}."
        )
    return path


def existing_metrics(target: str | Path, tool: str = "tuitrain") -> Path:
    """The metrics file of an existing run (`run_target`), a regular file or missing, else
    RunTargetError. A checkpoint (whole or sharded) is refused naming the run dir it lies
    in: `tool` reads a run's records, not its weights."""
    given = Path(target)
    if CHECKPOINT.match(given.name):
        run_dir = given.parent.parent if given.parent.name == CKPT_DIR else None
        raise RunTargetError(
            f"{target} is a checkpoint, and {tool} reads a run's metrics, not its weights; "
            f"pass the run dir{f' ({run_dir})' if run_dir else ''} or its {METRICS_NAME}."
        )
    path = run_target(target)
    regular_or_missing(path, f"pass a run dir or its {METRICS_NAME}")
    return path


def head_state(path: Path) -> str:
    """What a metrics file's first line says (`first_line_state`), read without following a
    link or waiting on a FIFO (NotRegular or OSError as `open_regular` raises them)."""
    with open_regular(path, "rb") as f:
        return first_line_state(f.readline(PROBE_BYTES))


def first_line_state(first: bytes) -> str:
    """What a file's first line (up to PROBE_BYTES, with its newline) says: "empty" (no
    byte yet), "writing" (no newline yet, short and opening a JSON object: a run starting),
    "record" (a line `classify_line` takes, or a record with a step no axis holds) or
    "other" (no tuitrain metrics file)."""
    if not first:
        return "empty"
    if not first.endswith(b"\n"):
        return "writing" if len(first) < PROBE_BYTES and first[:1] == b"{" else "other"
    record, why = classify_line(first[:-1], clean=False)
    return "record" if record is not None or why == "off-range" else "other"


def has_run_files(folder: Path) -> bool:
    """True for a folder holding a run's first files (a run starting up)."""
    return folder.is_dir() and any((folder / name).exists() for name in RUN_FILES)


def find_runs(folder: Path) -> list[Path]:
    """The run dirs directly under `folder` (each holds a metrics file)."""
    return [
        child for child in folder.iterdir() if child.is_dir() and RunDir(child).metrics.is_file()
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


OUTPUT_TAIL_BYTES = 64 * 1024  # output_tail (OutputTail at first) reads this much of the log
OUTPUT_READ_BYTES = 256 * 1024  # OutputTail: at most this much a call (later calls read on)


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
    """(the last record of a metrics file, the step of the last record that has one), read
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


class Reading:
    """The complete records of a metrics file, one line at a time (memory stays flat
    whatever the file's size), and notes on what was left out: a half-written last line,
    lines that are not records, records with a step no axis holds. A file that cannot be
    read, or holds no record, is RunTargetError (exit 2). Iterate it more than once to read
    the file again (the counts start over)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.bad: list[int] = []
        self.off_range = 0  # train and eval records whose step is outside 0..STEP_MAX
        self.torn = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.count, self.bad, self.off_range, self.torn = 0, [], 0, False
        try:
            f = open_regular(self.path, "rb", f"pass a run dir or its {METRICS_NAME}")
        except OSError as exc:
            raise RunTargetError(f"{self.path} cannot be read ({exc.strerror or exc}).") from exc
        with f:
            for number, line in enumerate(f, start=1):
                if not line.endswith(b"\n"):
                    self.torn = bool(line.strip())  # the last line, cut or still being written
                    break
                record, why = classify_line(line[:-1])
                if why == "off-range":
                    self.off_range += 1  # no x axis can hold it (negative, past int64)
                elif why in ("bad", "too-long"):
                    self.bad.append(number)  # not a record (or longer than any record)
                elif record is not None:
                    self.count += 1
                    yield record
        if not self.count:
            raise RunTargetError(
                f"{self.path} holds no tuitrain record; is it a run's {METRICS_NAME}?"
            )

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.torn:
            notes.append("the last line is half-written (a run still writing, or cut): left out")
        if self.bad:
            shown = ", ".join(map(str, self.bad[:5])) + (" …" if len(self.bad) > 5 else "")
            notes.append(f"{len(self.bad)} line(s) that are not records left out (line {shown})")
        if self.off_range:
            notes.append(f"{self.off_range} record(s) with a step outside 0..2^63-1 left out")
        return notes


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Each record of a metrics file as JsonlSink wrote it (blank, invalid and non-record lines
    and lines over the limit skipped, a last line without its newline left out), its fields
    uncleaned (a writer's round trip)."""
    yield from read_records(path, clean=False)


def output_tail(run_dir: Path, max_bytes: int = OUTPUT_TAIL_BYTES) -> list[str]:
    """The last lines of a script's output log (at most `max_bytes` read from its end, the
    first line cut by the read left out), decoded leniently; [] without one."""
    fd = _open_fd(RunDir(run_dir).output_log)
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


class OutputTail:
    """The lines appended to a run's output log since the last `read()`: the last
    OUTPUT_TAIL_BYTES at first (the line that read cuts left out), at most OUTPUT_READ_BYTES
    a call, a partial last line kept until its newline comes, a file that shrank read again
    from its tail; decoded leniently, control characters stripped. Never waits on a FIFO
    there, never follows a link."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset: int | None = None
        self.partial = b""

    def read(self) -> list[str]:
        fd = _open_fd(self.path)
        if fd is None:
            return []
        try:
            size = os.fstat(fd).st_size
            first = self.offset is None or size < self.offset  # first look, or truncated
            if first:
                self.offset, self.partial = max(0, size - OUTPUT_TAIL_BYTES), b""
            assert self.offset is not None
            data = os.pread(fd, OUTPUT_READ_BYTES, self.offset)
        except OSError:
            return []
        finally:
            os.close(fd)
        cut = first and self.offset > 0  # the tail starts mid-line
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if cut and lines:
            lines = lines[1:]
        return [strip_controls(line.decode("utf-8", "replace")) for line in lines]
