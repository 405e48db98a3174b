"""A run's segments: `tuitrain --resume` appends a header and its records to the run's file,
and the header it appends carries the run's `history` (records.header_history): what the
segments before it were. `read_segment` reads the last segment (its header, found backwards
with bytes operations, and the tail after it: never the whole file); `earlier_segments` is
the history the engine writes when it resumes (the file read once, its train lines unparsed
but the last).

A header is found as every writer starts its line (`HEADER_LINE`: a newline, then
follow.HEADER_PREFIX), SEARCH_CHUNK bytes at a time from the end: no line before the last
header becomes a Python object, memory stays bounded whatever the size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, cast

from tuitrain.core.safefile import NotRegular, open_regular
from tuitrain.metrics.records import (
    MAX_HEADER_BYTES,
    eval_metric_items,
    header_history,
    history_of,
    metric_goal,
    record_time,
    task_declaration,
    valid_step,
)
from tuitrain.rundir.follow import HEADER_PREFIX, TRAIN_PREFIX
from tuitrain.rundir.read import parse_line, read_tail

HEADER_LINE = b"\n" + HEADER_PREFIX  # a header's line as every writer starts it, after a newline
SEARCH_CHUNK = 1 << 20  # the backwards search for the last header reads this much at a time
END_LINE_BYTES = 1 << 16  # the last line read for an end record's `header_at`


def header_at(f: BinaryIO, offset: int) -> tuple[dict[str, Any] | None, int]:
    """(the header whose whole line starts at `offset`, the offset after its line), or
    (None, 0): no header there, or its line not written whole yet."""
    f.seek(offset)
    line = f.readline(MAX_HEADER_BYTES + 1)
    if not line.endswith(b"\n"):
        return None, 0
    rec = parse_line(line[:-1])
    if rec is None or rec.get("type") != "header":
        return None, 0
    return rec, offset + len(line)


def header_starts(f: BinaryIO, begin: int, size: int) -> Iterator[int]:
    """The offsets of the lines after byte `begin` (a newline) that start as a header, the
    last first: bytes searched backwards SEARCH_CHUNK at a time, no line parsed."""
    pos, width = size, len(HEADER_LINE)
    while pos > begin:
        start = max(begin, pos - SEARCH_CHUNK)
        f.seek(start)
        data = f.read(min(size, pos + width - 1) - start)  # a match across `pos` is whole
        end = len(data)
        while (at := data.rfind(HEADER_LINE, 0, end)) >= 0:
            yield start + at + 1
            end = at
        pos = start


def told_header(f: BinaryIO, size: int) -> int | None:
    """Where the last segment's header starts, as the file's last line tells it: an end
    record's `header_at` (JsonlSink writes it), checked to lie inside the file. None: the
    last line is no end record naming one (a running or killed run, an older writer's)."""
    start = max(0, size - END_LINE_BYTES)
    f.seek(start)
    data = f.read(size - start)
    if not data.endswith(b"\n"):
        return None
    cut = data.rfind(b"\n", 0, len(data) - 1)
    if cut < 0 and start > 0:
        return None  # the last line is longer than the read: search instead
    rec = parse_line(data[cut + 1 : -1])
    told = rec.get("header_at") if rec is not None and rec.get("type") == "end" else None
    if isinstance(told, int) and not isinstance(told, bool) and 0 <= told < size:
        return told
    return None


def last_header(f: BinaryIO, size: int) -> tuple[dict[str, Any], int] | None:
    """(the file's last header, the offset after its line); None when the first line is no
    header (no run). The header the last end record names is taken where it is one; else
    the file is searched backwards."""
    first, after = header_at(f, 0)
    if first is None:
        return None
    told = told_header(f, size)
    if told is not None:
        found, found_after = header_at(f, told) if told else (first, after)
        if found is not None:
            return found, found_after
    for offset in header_starts(f, after - 1, size):
        found, found_after = header_at(f, offset)
        if found is not None:
            return found, found_after
    return first, after


def read_segment(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int] | None:
    """(the last header, the tail's records after it, the file size read); None: no run."""
    with cast(BinaryIO, open_regular(path, "rb")) as f:
        size = f.seek(0, 2)
        found = last_header(f, size)
        if found is None:
            return None
        header, after = found
        return header, read_tail(f, after, size), size


def segment_seconds(
    header: Mapping[str, Any] | None, end: Mapping[str, Any] | None, now: float | None
) -> float | None:
    """How long the segment under `header` ran: its end's elapsed_s, else from its header's
    time to `now` (the file's last change: a run still going, or one that died)."""
    elapsed = (end or {}).get("elapsed_s")
    if isinstance(elapsed, (int, float)) and math.isfinite(elapsed) and elapsed >= 0:
        return float(elapsed)
    when = record_time(header or {})
    if when is None or now is None:
        return None
    return max(now - when.timestamp(), 0.0)


def better(a: float | None, b: float, mode: str) -> float:
    """The better of `a` (None: none yet) and `b` by `mode`."""
    if a is None:
        return b
    return max(a, b) if mode == "max" else min(a, b)


def earlier_segments(path: Path) -> dict[str, Any] | None:
    """The `history` of the header a resumed run is about to append to `path`: the last
    header's history and the segment after it, read once (its train lines left unparsed but
    the last). None when the file holds no run (a resume into a new run dir)."""
    try:
        with cast(BinaryIO, open_regular(path, "rb")) as f:
            found = last_header(f, f.seek(0, 2))
            if found is None:
                return None
            header, after = found
            segment = _Segment(header)
            f.seek(after)
            last_train = b""
            for line in f:
                if not line.endswith(b"\n"):
                    break  # cut: the writer died mid-line
                if line.startswith(TRAIN_PREFIX):
                    last_train = line
                elif (rec := parse_line(line[:-1])) is not None:
                    segment.add(rec)
    except (OSError, NotRegular):
        return None
    if last_train and (rec := parse_line(last_train[:-1])) is not None:
        segment.add(rec)
    return segment.history()


class _Segment:
    """What one segment's records say, taken one record at a time (`earlier_segments`)."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.header, self.task = header, task_declaration(header)
        self.prior = history_of(header)
        self.best: dict[str, float] = dict(self.prior["best"]) if self.prior else {}
        self.end: dict[str, Any] | None = None
        self.last_time: float | None = None
        self.step: int | None = None

    def add(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        if (when := record_time(rec)) is not None:
            self.last_time = max(self.last_time or 0.0, when.timestamp())
        if kind in ("train", "eval", "end") and valid_step(rec.get("step")):
            self.step = max(self.step or 0, rec["step"])
        if kind == "end":
            self.end = rec
        elif kind == "eval":
            for name, value in eval_metric_items(rec):
                if value is not None:
                    goal = metric_goal(name, self.task)
                    self.best[name] = better(self.best.get(name), float(value), goal)

    def history(self) -> dict[str, Any]:
        prior, header = self.prior, self.header
        seconds = segment_seconds(header, self.end, self.last_time) or 0.0
        started = header.get("time") if isinstance(header.get("time"), str) else None
        return header_history(
            segments=(prior["segments"] if prior else 0) + 1,
            elapsed_s=(prior["elapsed_s"] if prior else 0.0) + seconds,
            started=prior["started"] if prior and prior["started"] else started,
            step=self.step if self.step is not None else (prior["step"] if prior else None),
            best=self.best,
        )
