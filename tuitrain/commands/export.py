"""`tuitrain export RUN_DIR --format csv|tensorboard --out PATH`: a run's records for the tools
people already use (pandas and spreadsheets, TensorBoard). Reads the run's metrics file only
(through `rundir.read`); the run is never touched. The CSV goes to standard output with
`--out -` or without `--out` (a pipe into pandas, `column`, `head`); TensorBoard's event
files need a folder. TensorBoard needs the `tensorboard` package (`pip install
'tuitrain[tensorboard]'`); without it, one sentence and exit 2.

`tuitrain.engine.tensorboard.TensorBoardSink` writes the same scalars during a run when the
preset asks for it (`run.tensorboard = true`: event files in the run dir's tensorboard
folder).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuitrain.core.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.core.safefile import open_nofollow, replacing
from tuitrain.engine.tensorboard import scalars, summary_writer
from tuitrain.metrics.records import (
    CLASSIFY_DECLARATION,
    TRAIN_FIELDS,
    Record,
    add_aliases,
    eval_metric_items,
    task_declaration,
    train_metric_items,
)
from tuitrain.rundir.layout import METRICS_NAME
from tuitrain.rundir.read import Reading, existing_metrics

# CSV columns: one row per train or eval record, validation columns filled on eval rows.
# These are a classification run's (its declaration's validation metrics, records.
# CLASSIFY_DECLARATION); another task's come from its header (csv_columns).
CSV_COLUMNS = (
    "type",
    *[f for f in TRAIN_FIELDS if f != "type"],
    *[m["name"] for m in CLASSIFY_DECLARATION["metrics"] if m["split"] == "val"],
)


class ExportError(UserError):
    """One sentence for the user, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain export",
        description="Export a run's train and eval records: CSV (one row per record, for "
        "pandas and spreadsheets) or TensorBoard event files.",
    )
    p.add_argument("run", metavar="RUN_DIR", help=f"a run dir, or its {METRICS_NAME}")
    p.add_argument("--format", choices=["csv", "tensorboard"], required=True)
    p.add_argument(
        "--out",
        default="-",
        help="the CSV file (- or none: standard output), or the folder for TensorBoard's "
        "event files",
    )
    return p


def refuse_run_files(out: Path, metrics: Path) -> None:
    """An output never replaces an input: refused when `out` is the metrics file or any
    file of the run dir it lies in (by path, through links, or as a hard link elsewhere)."""
    run_dir = metrics.parent.resolve()
    try:
        out_stat = os.stat(out)
    except OSError:
        out_stat = None
    target = out.resolve()
    inside = target == run_dir or run_dir in target.parents
    same = out_stat is not None and any(
        (f.st_dev, f.st_ino) == (out_stat.st_dev, out_stat.st_ino) for f in _run_files(run_dir)
    )
    if same or (inside and (out_stat is not None or out.is_symlink())):
        raise ExportError(
            f"--out {out} is a file of the run being read ({run_dir}); writing there would "
            "replace it: name a new file, or a path outside the run dir."
        )


def _run_files(run_dir: Path, limit: int = 10_000) -> Iterator[os.stat_result]:
    """The stat of the run dir and each entry in it, checkpoints included (bounded)."""
    yield os.stat(run_dir)
    for n, (folder, dirs, files) in enumerate(os.walk(run_dir)):
        if n > limit:
            return
        for name in [*dirs, *files]:
            with contextlib.suppress(OSError):
                yield os.stat(os.path.join(folder, name))


def undeclared_columns(
    records: Iterable[Record], limit: int = 256, names: dict[str, str] | None = None
) -> list[str]:
    """The metric fields of a run whose header declares none (a script's run through the
    client): every train field outside the contract and every eval field, in the order
    first seen (one streaming pass; at most `limit`). `names` gets the run's aliases (the
    names the script logged fields under, records.aliases)."""
    seen: dict[str, None] = {}
    for record in records:
        if names is not None and add_aliases(names, record):
            continue
        if record.get("type") == "train":
            items = [k for k, _ in train_metric_items(record)] + (
                ["tokens_per_s"] if "tokens_per_s" in record else []
            )
        elif record.get("type") == "eval":
            items = [k for k, _ in eval_metric_items(record)]
        else:
            continue
        for key in items:
            if key not in seen and len(seen) < limit:
                seen[key] = None
    return list(seen)


def csv_columns(
    header: Record | None, undeclared: Sequence[str] = (), names: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The train record's fields, tokens/s where the task counts tokens, then the metrics
    the header's task declares and those the records hold (`undeclared`): train metrics,
    then the validation ones in declaration order. No column for a metric the run never
    declares nor records (a language model has no accuracy); a classification run (an old
    header reads as one) gets CSV_COLUMNS exactly. A field a script logged under another
    name (`names`: {field: its name}) has a second column under that name right after its
    own, with the same values: `loss,train_loss`, `val_top1,eval_top1`."""
    if header is None:
        return CSV_COLUMNS
    columns = _task_columns(header, undeclared)
    if not names:
        return columns
    out: list[str] = []
    for column in columns:
        out.append(column)
        alias = names.get(column)
        if alias and alias not in columns and alias not in out:
            out.append(alias)
    return tuple(out)


def _task_columns(header: Record, undeclared: Sequence[str]) -> tuple[str, ...]:
    task = task_declaration(header)
    train = [m["name"] for m in task["metrics"] if m["split"] == "train"]
    val = [m["name"] for m in task["metrics"] if m["split"] == "val"]
    train += [n for n in undeclared if not n.startswith("val_")]
    val += [n for n in undeclared if n.startswith("val_")]
    task_raw = header.get("task")
    tokens = ["tokens_per_s"] if isinstance(task_raw, dict) and task_raw.get("tokens") else []
    base = [c for c in CSV_COLUMNS if not c.startswith("val_")]
    known = set(base) | set(tokens)
    extra_train = [n for n in dict.fromkeys(train) if n not in known]
    extra_val = [n for n in dict.fromkeys(val) if n not in known and n not in extra_train]
    return (*base, *tokens, *extra_train, *extra_val)


def csv_rows(
    records: Iterable[Record],
    columns: list[tuple[str, ...]] | None = None,
    undeclared: Sequence[str] = (),
    names: Mapping[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """One row per train or eval record; `columns` (a one-item list) is set from the first
    header, before the first row; an alias column (`names`) holds its field's value."""
    box = columns if columns is not None else [CSV_COLUMNS]
    source: dict[str, str] = {}  # {alias column: the field it reads}
    seen_header = False
    for record in records:
        if record.get("type") == "header" and not seen_header:
            seen_header = True
            box[0] = csv_columns(record, undeclared, names)
            own = set(_task_columns(record, undeclared))  # a column of its own reads itself
            source = {a: f for f, a in (names or {}).items() if a in box[0] and a not in own}
        elif record.get("type") in ("train", "eval"):
            seen_header = True  # a header after the first row changes no column
            yield {key: _cell(record.get(source.get(key, key))) for key in box[0]}


def _cell(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return "" if value is None or isinstance(value, (list, dict)) else value


def write_csv(
    records: Iterable[Record],
    out: Path,
    undeclared: Sequence[str] = (),
    names: Mapping[str, str] | None = None,
) -> int:
    """Rows streamed to a temp file beside `out`, renamed over it at the end: a failed
    export leaves no half-written CSV (and an existing one intact)."""
    rows = 0
    columns = [CSV_COLUMNS]
    with replacing(out) as tmp, open_nofollow(tmp, "w", newline="", encoding="utf-8") as f:
        writer = None
        for row in csv_rows(records, columns, undeclared, names):
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=columns[0])
                writer.writeheader()
            writer.writerow(row)
            rows += 1
        if writer is None:  # no row: the column line alone
            csv.DictWriter(f, fieldnames=columns[0]).writeheader()
    return rows


def print_csv(
    records: Iterable[Record],
    undeclared: Sequence[str] = (),
    names: Mapping[str, str] | None = None,
) -> int:
    """The rows on standard output as they are read (a closed pipe, `| head`, ends it
    quietly)."""
    rows = 0
    columns = [CSV_COLUMNS]
    writer = None
    for row in csv_rows(records, columns, undeclared, names):
        if writer is None:
            writer = csv.DictWriter(sys.stdout, fieldnames=columns[0], lineterminator="\n")
            writer.writeheader()
        writer.writerow(row)
        rows += 1
    if writer is None:
        csv.DictWriter(sys.stdout, fieldnames=columns[0], lineterminator="\n").writeheader()
    sys.stdout.flush()
    return rows


def write_tensorboard(records: Iterable[Record], folder: Path) -> int:
    writer = summary_writer(folder)
    count = 0
    try:
        for record in records:
            for tag, value, step in scalars(record):
                writer.add_scalar(tag, value, step)
                count += 1
    finally:
        writer.close()
    return count


def scan_undeclared(metrics: Path) -> tuple[list[str], dict[str, str]]:
    """A script's run (its header declares no metric): one more streaming pass finds them,
    and the names the script logged its fields under ({field: name}, records.aliases)."""
    first = next(iter(Reading(metrics)), None)
    task = (first or {}).get("task")
    if first is None or first.get("type") != "header":
        return [], {}
    if isinstance(task, dict) and task.get("metrics"):
        return [], {}  # declared in the header
    names: dict[str, str] = {}
    return undeclared_columns(Reading(metrics), names=names), names


def leave_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM or SIGHUP: leave as Ctrl-C does, through the cleanup (no temp file is left)."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, leave_on_signal)
    try:
        metrics = existing_metrics(args.run, "export")
        reading = Reading(metrics)
        if args.out == "-":
            if args.format != "csv":
                raise ExportError(
                    "--format tensorboard writes event files into a folder; pass --out FOLDER."
                )
            count = print_csv(reading, *scan_undeclared(metrics))
            for note in reading.notes:
                print(f"tuitrain export: {note}", file=sys.stderr)
            print(f"tuitrain export: {count} rows written to standard output", file=sys.stderr)
            return 0
        out = Path(args.out).expanduser()
        refuse_run_files(out, metrics)
        if args.format == "csv":
            if out.is_dir():
                raise ExportError(f"--out {out} is a folder; name the CSV file to write.")
            count = write_csv(reading, out, *scan_undeclared(metrics))
            what = f"{count} rows"
        else:
            if out.exists() and not out.is_dir():
                raise ExportError(f"--out {out} is a file; name a folder for the event files.")
            count = write_tensorboard(reading, out)
            what = f"{count} scalars (tensorboard --logdir {out})"
        notes = reading.notes
    except BrokenPipeError:  # `tuitrain export RUN | head`: the reader has enough
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"tuitrain export: error: cannot write ({exc.strerror or exc}).", file=sys.stderr)
        return EXIT_USAGE
    except UserError as exc:
        print(f"tuitrain export: error: {exc}", file=sys.stderr)
        return exc.exit_code
    for note in notes:
        print(f"tuitrain export: {note}", file=sys.stderr)
    print(f"tuitrain export: {what} written to {out}", file=sys.stderr)
    return 0
