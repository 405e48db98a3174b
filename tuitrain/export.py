"""`tuitrain export RUN_DIR --format csv|tensorboard --out PATH`: a run's records for the tools
people already use (pandas and spreadsheets, TensorBoard). Reads metrics.jsonl only; the run
is never touched. TensorBoard needs the `tensorboard` package (`pip install
'tuitrain[tensorboard]'`); without it, one sentence and exit 2.

`TensorBoardSink` writes the same scalars during a run when the preset asks for it
(`run.tensorboard = true`: event files in RUN_DIR/tensorboard).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tuitrain.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.metrics.records import TRAIN_FIELDS, Record, clean_record
from tuitrain.metrics.sinks import Sink

# CSV columns: one row per train or eval record, validation columns filled on eval rows.
CSV_COLUMNS = ("type", *[f for f in TRAIN_FIELDS if f != "type"], "val_loss", "val_acc")
# TensorBoard tags per record field (train records, then eval records).
TB_TRAIN = {
    "loss": "train/loss",
    "lr": "optim/lr",
    "grad_norm": "optim/grad_norm",
    "samples_per_s": "perf/samples_per_s",
    "step_time_s": "perf/step_time_s",
    "data_wait_frac": "perf/data_wait_frac",
    "mem_alloc_bytes": "memory/alloc_bytes",
    "mem_reserved_bytes": "memory/reserved_bytes",
    "mem_peak_bytes": "memory/peak_bytes",
    "gpu_mem_used_bytes": "memory/gpu_used_bytes",
    "host_rss_bytes": "memory/host_rss_bytes",
    "gpu_util_pct": "perf/gpu_util_pct",
    "tflops": "perf/tflops",
    "mfu": "perf/mfu",
    "monitor_frac": "perf/monitor_frac",
    "grad_scale": "amp/grad_scale",
    "skipped_steps": "amp/skipped_steps",
}
TB_EVAL = {"val_loss": "val/loss", "val_acc": "val/acc"}
TB_EXTRA = "pip install 'tuitrain[tensorboard]' (or pip install tensorboard)"


class ExportError(UserError):
    """One sentence for the user, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain export",
        description="Export a run's train and eval records: CSV (one row per record, for "
        "pandas and spreadsheets) or TensorBoard event files.",
    )
    p.add_argument("run", metavar="RUN_DIR", help="a run dir, or its metrics.jsonl")
    p.add_argument("--format", choices=["csv", "tensorboard"], required=True)
    p.add_argument(
        "--out", required=True, help="the CSV file, or the folder for TensorBoard's event files"
    )
    return p


def metrics_file(target: str) -> Path:
    given = Path(target).expanduser()
    path = given / "metrics.jsonl" if given.is_dir() else given
    if not given.exists():
        raise ExportError(f"{target} does not exist; pass a run dir or its metrics.jsonl.")
    if not path.is_file():
        raise ExportError(
            f"{target} is not a run dir (it has no metrics.jsonl); pass the --run-dir of a run."
        )
    return path


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The complete records of `path` and notes on what was left out (a half-written last
    line, lines that are not records); not a single record is an ExportError."""
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    notes: list[str] = []
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ExportError(f"{path} cannot be read ({exc.strerror or exc}).") from exc
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" when the file ends with one
    if tail.strip():
        notes.append("the last line is half-written (a run still writing, or cut): left out")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, 5000 digits, deep nesting
            bad.append(number)
            continue
        record = clean_record(record) if isinstance(record, dict) else None
        if record is None:  # no record of the contract (no text "type")
            bad.append(number)
            continue
        records.append(record)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" …" if len(bad) > 5 else "")
        notes.append(f"{len(bad)} line(s) that are not records left out (line {shown})")
    if not records:
        raise ExportError(f"{path} holds no tuitrain record; is it a run's metrics.jsonl?")
    return records, notes


def csv_rows(records: Sequence[Record]) -> Iterator[dict[str, Any]]:
    for record in records:
        if record.get("type") in ("train", "eval"):
            yield {key: _cell(record.get(key)) for key in CSV_COLUMNS}


def _cell(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return "" if value is None or isinstance(value, (list, dict)) else value


def write_csv(records: Sequence[Record], out: Path) -> int:
    rows = 0
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in csv_rows(records):
            writer.writerow(row)
            rows += 1
    return rows


def summary_writer(folder: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ExportError(f"TensorBoard export needs the tensorboard package: {TB_EXTRA}.") from exc
    return SummaryWriter(log_dir=str(folder))


def scalars(record: Record) -> Iterator[tuple[str, float, int]]:
    """(tag, value, step) for each number of a train or eval record."""
    tags = TB_TRAIN if record.get("type") == "train" else TB_EVAL
    step = record.get("step")
    if not isinstance(step, int) or record.get("type") not in ("train", "eval"):
        return
    for field, tag in tags.items():
        value = record.get(field)
        if isinstance(value, (int, float)) and math.isfinite(value):
            yield tag, float(value), step


def write_tensorboard(records: Sequence[Record], folder: Path) -> int:
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


class TensorBoardSink(Sink):
    """Live TensorBoard event files (run.tensorboard = true), written as records arrive.
    Opt-in: TensorBoard's writer costs a little per record, on the engine's thread."""

    def __init__(self, folder: Path) -> None:
        self.writer = summary_writer(folder)

    def write(self, record: Record) -> None:
        for tag, value, step in scalars(record):
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        records, notes = read_records(metrics_file(args.run))
        out = Path(args.out).expanduser()
        if args.format == "csv":
            if out.is_dir():
                raise ExportError(f"--out {out} is a folder; name the CSV file to write.")
            count = write_csv(records, out)
            what = f"{count} rows"
        else:
            if out.exists() and not out.is_dir():
                raise ExportError(f"--out {out} is a file; name a folder for the event files.")
            count = write_tensorboard(records, out)
            what = f"{count} scalars (tensorboard --logdir {out})"
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
