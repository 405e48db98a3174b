"""The one run summary: what `tuitrain runs`, an ending, compare and the gate say of a run.

A run is every segment it resumed: `tuitrain --resume` appends a header and its records to
the run's file, and the header it appends carries the run's `history`
(records.header_history): what the segments before it were. So a run is read from its last
header and the tail after it, never the whole file (`read_segment`): its duration is the
earlier segments' plus this one's, its best evaluation the best of theirs and the tail's, its
steps the last segment's, its start the first segment's. A header without `history` starts a
run (a fresh run, or a resume written before headers carried it). `earlier_segments` is the
history the engine writes when it resumes (the file read once, its train lines unparsed but
the last).

The last header is the one the file's closing end record names (`header_at`, JsonlSink
writes it); a file that ends otherwise (a running or killed run) is searched backwards for a
line that starts as every writer starts a header (`HEADER_LINE`: a newline, then
follow.HEADER_PREFIX), SEARCH_CHUNK bytes at a time: no line before the last header becomes
a Python object, memory stays bounded whatever the size.

The metric a run is judged by (`judged_metric`): the primary metric its header's task
declares; a task that declares none (a script's) is judged by the first evaluation metric it
logged other than its loss (a script's `val/acc`, `eval/f1` ...), else by its loss. Its goal
and format are the header's declaration where it has one; otherwise lower is better for a
name that says loss or error (records.metric_goal), higher for any other, and the format a
plain number.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

from tuitrain.core.safefile import NotRegular, open_regular
from tuitrain.metrics.format import format_duration, format_value
from tuitrain.metrics.records import (
    EVAL_PREFIX,
    MAX_HEADER_BYTES,
    eval_metric_items,
    format_metric,
    header_history,
    history_of,
    metric_goal,
    record_time,
    task_declaration,
    valid_step,
)
from tuitrain.rundir.follow import HEADER_PREFIX, TRAIN_PREFIX
from tuitrain.rundir.layout import RunDir
from tuitrain.rundir.lock import writer_gone
from tuitrain.rundir.read import parse_line, read_tail
from tuitrain.rundir.state import quiet_seconds, run_status

# --- segments: a resumed run's file holds several; its last is read, never the whole file

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


# --- the summary

VAL_LOSS = EVAL_PREFIX + "loss"  # the contract's validation loss (a script's `val/loss`)


@dataclass
class RunSummary:
    """One run, every segment it resumed, as `tuitrain runs` lists it."""

    run_dir: str
    name: str
    status: str
    preset: str | None
    task: str | None
    steps: int | None  # the last segment's last step
    best: float | None  # the judged metric's best over every segment's evaluations
    best_metric: str | None  # the metric the run is judged by (judged_metric); None: none
    best_format: str
    samples_per_s: float | None
    tokens_per_s: float | None
    duration_s: float | None  # every segment's, summed
    started: str | None  # the first segment's header time
    best_mode: str = "max"  # the best metric's goal: "max" (accuracy) or "min" (loss)
    step_time_s: float | None = None  # median seconds a step: a script's rate where no samples/s
    segments: int = 1  # 1, and one more for each time the run was resumed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- the judged metric


@dataclass(frozen=True, slots=True)
class Judged:
    """The metric a run is judged by: its field, its goal ("max" or "min"), its format."""

    name: str
    mode: str
    format: str


def judged_metric(header: Mapping[str, Any] | None, names: Iterable[str]) -> Judged | None:
    """The metric a run is judged by (see the module's docstring): the header's declared
    primary, else the first of `names` (the evaluation metrics the run logged, in order)
    other than its loss, else its loss; None without either."""
    task = task_declaration(header)
    name = task["primary"]
    if name is None:
        logged = [n for n in dict.fromkeys(names) if n.startswith(EVAL_PREFIX)]
        name = next((n for n in logged if n != VAL_LOSS), logged[0] if logged else None)
        if name is None:
            return None
    fmt = next((m["format"] for m in task["metrics"] if m["name"] == name), "float")
    return Judged(name, metric_goal(name, task), fmt)


def eval_names(evals: Iterable[Mapping[str, Any]]) -> list[str]:
    """The evaluation metrics `evals` hold, in the order first seen."""
    return list(dict.fromkeys(n for rec in evals for n, _ in eval_metric_items(rec)))


# --------------------------------------------------------------------------- the summary


def summarize_run(run_dir: Path) -> RunSummary | None:
    """One run from its last header and its tail, never the whole file; None when the
    folder holds no run."""
    return summarize_metrics(RunDir(run_dir).metrics, run_dir)


def summarize_metrics(path: Path, run_dir: Path | None = None) -> RunSummary | None:
    """The run in the metrics file `path` (of `run_dir`, its folder unless given)."""
    run_dir = path.parent if run_dir is None else run_dir
    for _ in range(3):
        try:
            read = read_segment(path)
        except (OSError, NotRegular):
            return None
        if read is None:
            return None
        header, tail, size = read
        end = next((r for r in reversed(tail) if r.get("type") == "end"), None)
        exited = end is None and writer_gone(run_dir)
        try:
            grew = exited and path.stat().st_size != size  # it wrote (its end?) as it exited
        except OSError:
            grew = False
        if not grew:
            break
    trains = [r for r in tail if r.get("type") == "train"]
    evals = [r for r in tail if r.get("type") == "eval"]
    try:
        changed: float | None = path.stat().st_mtime
    except OSError:
        changed = None
    return summary_of(
        run_dir,
        header,
        status=run_status(header, end, trains[-1] if trains else None, quiet_seconds(path), exited),
        end=end,
        evals=evals,
        steps=[r.get("step") for r in [*trains, *evals, *([end] if end else [])]],
        segment_s=segment_seconds(header, end, changed),
        samples_per_s=_median([r.get("samples_per_s") for r in trains]),
        tokens_per_s=_median([r.get("tokens_per_s") for r in trains]),
        step_time_s=_median([r.get("step_time_s") for r in trains]),
    )


def summary_of(
    run_dir: Path,
    header: Mapping[str, Any] | None,
    *,
    status: str,
    end: Mapping[str, Any] | None,
    evals: Sequence[Mapping[str, Any]],
    steps: Iterable[object],
    segment_s: float | None,
    samples_per_s: float | None = None,
    tokens_per_s: float | None = None,
    step_time_s: float | None = None,
) -> RunSummary:
    """A run from its last header (whose history is the earlier segments) and what its last
    segment holds: a file's tail (`summarize_metrics`) or a store's snapshot (compare, where
    a run starting has no header yet)."""
    header = header or {}
    history = history_of(header)
    earlier: dict[str, float] = history["best"] if history else {}
    task = task_declaration(header)
    judged = judged_metric(header, [*earlier, *eval_names(evals)])
    best: float | None = None
    if judged is not None:
        values = [r[judged.name] for r in [*evals, *([end] if end else [])]
                  if _finite(r.get(judged.name))]  # fmt: skip
        if judged.name in earlier:
            values.append(earlier[judged.name])
        for value in values:
            best = better(best, float(value), judged.mode)
    valid = [int(s) for s in steps if valid_step(s)]  # type: ignore[call-overload]
    last_step: int | None = max(valid) if valid else (history["step"] if history else None)
    duration = segment_s
    if history is not None:
        duration = history["elapsed_s"] + (segment_s or 0.0)
    started = history["started"] if history else None
    if started is None and isinstance(header.get("time"), str):
        started = header["time"]
    return RunSummary(
        run_dir=str(run_dir),
        name=run_dir.name,
        status=status,
        preset=str(header["preset"]) if header.get("preset") is not None else None,
        task=task["name"] if isinstance(header.get("task"), Mapping) else "classify",
        steps=last_step,
        best=best,
        best_metric=judged.name if judged else None,
        best_format=judged.format if judged else "float",
        samples_per_s=samples_per_s,
        tokens_per_s=tokens_per_s,
        duration_s=float(duration) if duration is not None else None,
        started=started,
        best_mode=judged.mode if judged else task["mode"],
        step_time_s=step_time_s,
        segments=history["segments"] + 1 if history else 1,
    )


def run_end(run_dir: Path) -> dict[str, Any] | None:
    """The end record of a run's last segment (its last header and tail read, never the
    whole file), or None: no end record yet, or no run there."""
    try:
        read = read_segment(RunDir(run_dir).metrics)
    except (OSError, NotRegular):
        return None
    if read is None:
        return None
    return next((r for r in reversed(read[1]) if r.get("type") == "end"), None)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if _finite(v)]
    return statistics.median(numbers) if numbers else None


# --------------------------------------------------------------------------- a run's row


def duration_text(seconds: float | None) -> str:
    return "–" if seconds is None else format_duration(seconds)


def rate_text(row: RunSummary) -> str:
    """tokens/s, else samples/s, else steps/s (a script's run, whose samples are unknown)."""
    if row.tokens_per_s is not None:
        return f"{row.tokens_per_s:,.0f} tok/s"
    if row.samples_per_s is not None:
        return f"{row.samples_per_s:,.0f}/s"
    if row.step_time_s is not None and row.step_time_s > 0:
        return f"{format_value(1.0 / row.step_time_s)} steps/s"
    return "–"


def cells(row: RunSummary) -> list[str]:
    """One run as `tuitrain runs` lists it (the terminal table and the plain one)."""
    best = (
        "–" if row.best is None else f"{row.best_metric} {format_metric(row.best, row.best_format)}"
    )
    started = "–"
    if row.started:
        try:
            started = datetime.fromisoformat(row.started).astimezone(UTC).strftime("%Y-%m-%d %H:%M")
        except ValueError:
            started = row.started[:16]
    return [
        row.name, row.status, row.preset or row.task or "–",
        "–" if row.steps is None else f"{row.steps:,}", best, rate_text(row),
        duration_text(row.duration_s), started,
    ]  # fmt: skip


COLUMNS = ["run", "status", "preset", "steps", "best", "throughput", "duration", "started"]
