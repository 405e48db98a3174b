"""`tuitrain runs [DIR]`: the runs under DIR (default runs/), newest first.

Each run is read from its metrics.jsonl's first line (the header, up to the contract's
MAX_HEADER_BYTES) and its last TAIL_BYTES (the newest records; extended backwards, doubling,
up to 4 x MAX_RECORD_BYTES while it holds no train or eval record), never whole: a thousand
runs list in about a second (`bench/runs_list.py`). Columns: name, status (running;
completed, failed, stopped from the end record; crashed: no end record and no process holds
the run dir's lock; silent: no end record, no lock to ask, nothing written for 10 minutes),
preset or task, steps (the contract's valid steps), best primary metric (over the
evaluations in the tail, by the header's declared mode), median samples/s (tokens/s where
recorded) over the tail's log points, duration, start time.

In a terminal: a table (`s` sorts by the next column, `/` filters by text, Enter opens `watch`
on the highlighted run, space marks runs and `c` compares the marked ones, 2 to 8). `--json`
prints a JSON array; without a terminal, a plain table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from tuitrain.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.metrics.records import (
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    format_metric,
    task_declaration,
    valid_step,
)

TAIL_BYTES = 32 * 1024  # the tail read first: a hundred of the engine's records
TAIL_MAX_BYTES = 4 * MAX_RECORD_BYTES  # extended backwards (doubling) up to this
SILENT_AFTER_S = 600.0  # no end record, no lock to ask, nothing written for this long


@dataclass
class RunRow:
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    out = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the first line of a tail is usually cut: skipped
        if isinstance(record, dict) and isinstance(record.get("type"), str):
            out.append(record)
    return out


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
        records = parse_lines(data)
        if start == begin or span >= TAIL_MAX_BYTES:
            return records
        if any(r.get("type") in ("train", "eval") for r in records):
            return records
        span *= 2


def read_row(run_dir: Path) -> RunRow | None:
    """One run from its header (up to MAX_HEADER_BYTES) and tail; None when the folder
    holds no run."""
    from tuitrain.engine.rundir import writer_gone

    path = run_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            head = f.readline(MAX_HEADER_BYTES + 1)
            if not head.endswith(b"\n"):
                return None  # no complete first line within the limit: no header
            size = f.seek(0, 2)
            tail = read_tail(f, len(head), size)
    except OSError:
        return None
    header = next(iter(parse_lines(head)), None)
    if header is None or header.get("type") != "header":
        return None
    end = next((r for r in reversed(tail) if r.get("type") == "end"), None)
    if end is not None:
        status = str(end.get("status") or "stopped")
    elif writer_gone(run_dir):
        status = "crashed"  # its writer exited without an end record (kill -9, OOM killer)
    else:  # held, or a run without a lock file: W&B's rule, silent 10 minutes may be dead
        quiet = _quiet_s(path)
        status = "silent" if quiet is not None and quiet > SILENT_AFTER_S else "running"
    trains = [r for r in tail if r.get("type") == "train"]
    evals = [r for r in tail if r.get("type") == "eval"]
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
    return RunRow(
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
    )


def _quiet_s(path: Path) -> float | None:
    import time

    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return None


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if _finite(v)]
    return statistics.median(numbers) if numbers else None


def list_runs(folder: Path) -> list[RunRow]:
    """Every run directly under `folder`, newest first (by start time, else file time)."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder of runs; pass the folder your runs are in.")
    rows = []
    for child in folder.iterdir():
        if child.is_dir() and (child / "metrics.jsonl").is_file():
            row = read_row(child)
            if row is not None:
                rows.append(row)

    def when(row: RunRow) -> float:
        try:
            return datetime.fromisoformat(row.started).timestamp() if row.started else 0.0
        except ValueError:
            return 0.0

    rows.sort(key=lambda r: (when(r), r.name), reverse=True)
    return rows


def duration_text(seconds: float | None) -> str:
    from tuitrain.metrics.format import format_duration

    return "–" if seconds is None else format_duration(seconds)


def rate_text(row: RunRow) -> str:
    if row.tokens_per_s is not None:
        return f"{row.tokens_per_s:,.0f} tok/s"
    return "–" if row.samples_per_s is None else f"{row.samples_per_s:,.0f}/s"


def cells(row: RunRow) -> list[str]:
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


def plain_table(rows: Sequence[RunRow]) -> str:
    from tuitrain.text import strip_controls

    table = [COLUMNS] + [[strip_controls(c) for c in cells(r)] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) if i in (0, 1, 2, 4) else c.rjust(w)
                  for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip()
        for line in table
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain runs",
        description="List the runs in a folder, newest first: status, steps, best metric, "
        "throughput, duration. In a terminal: a table to sort, filter, open and compare.",
    )
    p.add_argument("folder", nargs="?", default="runs", metavar="DIR",
                   help="the folder of runs (default runs/)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON array of the runs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        rows = list_runs(Path(args.folder))
    except UserError as exc:
        print(f"tuitrain runs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps([r.to_json() for r in rows]))
        return 0
    if not (sys.stdin.isatty() and sys.stdout.isatty()) or not rows:
        print(plain_table(rows) if rows else f"no runs in {args.folder}")
        return 0
    from tuitrain.ui.runs_app import RunsApp

    app = RunsApp(rows)
    choice = app.run()
    if not choice:
        return 0
    from tuitrain.watch import main as watch_main

    kind, paths = choice
    return watch_main(watch_args(kind, paths))


def watch_args(kind: str, paths: Sequence[str]) -> list[str]:
    """`tuitrain watch`'s arguments for the run (or runs) chosen: the paths after `--`, so
    that a run named `-h` or `--poll` is a run."""
    return ["--", *paths] if kind == "watch" else ["--compare", "--", *paths]
