"""`tuitrain runs [DIR]`: the runs under DIR (default runs/), newest first.

Each run is every segment it resumed (`tuitrain --resume` appends to its file), read as
`rundir.summary` reads it: the first line, the last header (whose `history` says what the
earlier segments were; found backwards with bytes operations) and the last TAIL_BYTES after
it (extended backwards, doubling, up to 4 x MAX_RECORD_BYTES while it holds no train or eval
record), never parsed whole: a thousand runs list in about a second (`bench/runs_list.py`).
Columns: name, status (running; completed, failed, stopped from the last segment's end
record; crashed: no end record and no process holds the run dir's lock; silent: no end record
and nothing written for 10 log intervals, at least 2 minutes, or 10 minutes where the log
interval is unknown: `rundir.state`'s rule), preset or task, steps (the last segment's last
valid step), best (the metric the run is judged by: its header's primary, a script's first
evaluation metric other than its loss; the best over the earlier segments and the tail's
evaluations, by the metric's goal), median samples/s (tokens/s where recorded, else steps/s)
over the tail's log points, duration (every segment's, summed), start time (the first
segment's).

In a terminal: a table (`s` sorts by the next column, `/` filters by text as you type, Enter
opens `watch` on the highlighted run, space marks runs and `c` compares the marked ones, 2 to
8). Escape or `q` in the view it opened brings the table back (its runs read again, marks,
filter, sort and highlighted run kept); `q` at the table leaves. `--json` prints a JSON array;
without a terminal, a plain table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from tuitrain.core.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.rundir.read import find_runs
from tuitrain.rundir.state import SILENT_UNKNOWN_S
from tuitrain.rundir.summary import COLUMNS, RunSummary, cells, summarize_run

SILENT_AFTER_S = SILENT_UNKNOWN_S  # kept for callers: the silence rule is rundir.state's

RunRow = RunSummary  # one run as listed: rundir.summary's, the one every command uses


def read_row(run_dir: Path) -> RunRow | None:
    """One run (every segment it resumed) from its last header and tail; None when the
    folder holds no run."""
    return summarize_run(run_dir)


def list_runs(folder: Path) -> list[RunRow]:
    """Every run directly under `folder`, newest first (by start time, else file time)."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder of runs; pass the folder your runs are in.")
    rows = [row for child in find_runs(folder) if (row := read_row(child)) is not None]

    def when(row: RunRow) -> float:
        try:
            return datetime.fromisoformat(row.started).timestamp() if row.started else 0.0
        except ValueError:
            return 0.0

    rows.sort(key=lambda r: (when(r), r.name), reverse=True)
    return rows


def plain_table(rows: Sequence[RunRow]) -> str:
    from tuitrain.core.text import strip_controls

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
    from tuitrain.host.stdio import can_draw_ui

    if can_draw_ui() or not rows:  # the check every command makes before its UI
        print(plain_table(rows) if rows else f"no runs in {args.folder}")
        return 0
    from tuitrain.commands.watch import main as watch_main
    from tuitrain.ui.runs_app import RunsApp, TableState

    state = TableState()
    while True:
        app = RunsApp(rows, state)
        code = app.run()
        if app.signal_exit_code is not None:  # SIGTERM, SIGINT, SIGHUP (a terminal gone)
            return app.signal_exit_code
        choice = app.choice
        if not choice:
            return code or 0
        state = app.kept or state
        kind, paths = choice
        code = watch_main(watch_args(kind, paths), back_to="runs")
        if code:  # a signal's code (the terminal gone...), or the run could not be opened
            return code
        try:  # back to the table: the runs as they are now
            rows = list_runs(Path(args.folder))
        except UserError as exc:
            print(f"tuitrain runs: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not rows:
            return 0


def watch_args(kind: str, paths: Sequence[str]) -> list[str]:
    """`tuitrain watch`'s arguments for the run (or runs) chosen: the paths after `--`, so
    that a run named `-h` or `--poll` is a run."""
    return ["--", *paths] if kind == "watch" else ["--compare", "--", *paths]
