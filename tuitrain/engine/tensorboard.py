"""TensorBoard scalars from records: the tags, the writer, and a live sink.

`tuitrain export --format tensorboard` writes a finished run's records with `scalars`;
`TensorBoardSink` writes the same scalars while a run goes (`run.tensorboard = true`). The
task's own metrics go under `train/<name>` and `val/<name>`. In the engine's layer, not in
`metrics/` (torch-free): the writer is torch's (`torch.utils.tensorboard`, imported lazily).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuitrain.core.errors import UserError
from tuitrain.metrics.records import Record, eval_metric_items, train_metric_items
from tuitrain.metrics.sinks import Sink


class TensorBoardMissing(UserError):
    """The tensorboard package is not installed: one sentence, exit 2."""


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
TB_EXTRA = "pip install 'tuitrain[tensorboard]' (or pip install tensorboard)"


def summary_writer(folder: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise TensorBoardMissing(
            f"TensorBoard export needs the tensorboard package: {TB_EXTRA}."
        ) from exc
    return SummaryWriter(log_dir=str(folder))


def scalars(record: Record) -> Iterator[tuple[str, float, int]]:
    """(tag, value, step) for each number of a train or eval record. An eval record's
    validation metrics are whatever its task declared and wrote, each `val_<name>` under
    `val/<name>` (val_loss -> val/loss, val_bpc -> val/bpc, a classifier's accuracy ->
    val/acc): no metric name is assumed."""
    step = record.get("step")
    if not isinstance(step, int) or record.get("type") not in ("train", "eval"):
        return
    if record.get("type") == "train":
        for field, tag in TB_TRAIN.items():
            value = record.get(field)
            if isinstance(value, (int, float)) and math.isfinite(value):
                yield tag, float(value), step
    if record.get("type") == "train":  # tokens/s and the task's own train metrics
        tps = record.get("tokens_per_s")
        if isinstance(tps, (int, float)) and math.isfinite(tps):
            yield "perf/tokens_per_s", float(tps), step
        for name, value in train_metric_items(record):
            if value is not None:
                yield f"train/{name}", float(value), step
    else:  # the validation metrics the record holds: val_bpc -> val/bpc
        for name, value in eval_metric_items(record):
            if value is not None:
                yield f"val/{name[len('val_') :]}", float(value), step


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
