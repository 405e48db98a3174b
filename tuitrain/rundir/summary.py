"""The one run summary: what `tuitrain runs`, an ending, compare and the gate say of a run,
read from its header and tail (never the whole file)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

from tuitrain.core.safefile import NotRegular, open_regular
from tuitrain.metrics.format import format_duration, format_value
from tuitrain.metrics.records import MAX_HEADER_BYTES, format_metric, task_declaration, valid_step
from tuitrain.rundir.layout import RunDir
from tuitrain.rundir.lock import writer_gone
from tuitrain.rundir.read import parse_line, read_tail
from tuitrain.rundir.state import quiet_seconds, run_status


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
    path = RunDir(run_dir).metrics
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
        header, tail, _ = _head_and_tail(RunDir(run_dir).metrics)
    except (OSError, NotRegular):
        return None
    if header is None:
        return None
    return next((r for r in reversed(tail) if r.get("type") == "end"), None)


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
