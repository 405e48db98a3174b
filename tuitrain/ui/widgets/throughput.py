"""Throughput panel: samples/s over steps with the current and mean rate, and step time."""

from __future__ import annotations

from collections.abc import Sequence

from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.view import Frame, format_rate, format_seconds, mean, rank_note, rank_table
from tuitrain.ui.widgets.chart import Line
from tuitrain.ui.widgets.panel import Panel, compact_layout


class ThroughputPanel(Panel):
    """Global samples/s (all ranks) as the engine measures it between log points; under DDP
    a per-rank step-time table with the straggler flagged."""

    TITLE = "Throughput · samples/s"
    SERIES = ("samples_per_s",)

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        rate = snap.get("samples_per_s")
        step_time = snap.get("step_time_s").last
        batch = (snap.header or {}).get("global_batch")
        batch_text = f" · {batch} samples/step" if batch else ""
        now, avg = format_rate(rate.last), format_rate(mean(rate.ys))
        rates = f"[$success]now[/] [b]{now}[/b]/s  mean {avg}/s"
        step = f"step {format_seconds(step_time)}{batch_text}"
        if self.is_attached and compact_layout(self.screen):
            # Two lines at most: the per-rank table becomes one note, first on the line so
            # that a narrow panel's ellipsis does not hide it.
            note = rank_note(snap.latest)
            return f"{rates}\n{note} · {step}" if note else f"{rates}\n{step}"
        ranks = rank_table(snap.latest)
        return f"{rates}\n{step}\n{ranks}" if ranks else f"{rates}\n{step}"

    def lines(self, snap: Snapshot, buckets: int) -> Sequence[Line]:
        return (Line(*snap.get("samples_per_s").decimate(buckets), color="success"),)

    def spark_series(self, snap: Snapshot) -> Series:
        return snap.get("samples_per_s")
