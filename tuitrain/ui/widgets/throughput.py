"""Throughput panel: samples/s over steps with the current and mean rate, step time, the
achieved TFLOP/s and MFU, and what the monitor costs (engine and, live, the UI thread)."""

from __future__ import annotations

from collections.abc import Sequence

from tuitrain.metrics.format import format_mfu, format_tflops
from tuitrain.metrics.records import Record
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
        latest = snap.latest or {}
        flops = flops_text(latest)
        cost = monitor_text(latest, frame.ui_cpu_frac)
        if self.is_attached and compact_layout(self.screen):
            # Two lines at most: the per-rank table becomes one note, first on the line so
            # that a narrow panel's ellipsis does not hide it.
            # The FLOP rate before the step time: an ellipsis cuts the end of the line.
            note = rank_note(snap.latest)
            short_step = f"step {format_seconds(step_time)}"
            second = " · ".join(t for t in (note, flops, short_step, cost) if t)
            return f"{rates}\n{second}"
        text = "\n".join(t for t in (rates, step, flops, cost) if t)
        ranks = rank_table(snap.latest)
        return f"{text}\n{ranks}" if ranks else text

    def lines(self, snap: Snapshot, buckets: int) -> Sequence[Line]:
        return (Line(*snap.get("samples_per_s").decimate(buckets), color="success"),)

    def spark_series(self, snap: Snapshot) -> Series:
        return snap.get("samples_per_s")


def flops_text(latest: Record) -> str:
    """``0.0104 TFLOP/s · MFU —`` from the newest train record ('' before the fields)."""
    tflops = latest.get("tflops")
    if tflops is None:
        return ""
    return f"[b]{format_tflops(tflops)}[/b] · {format_mfu(latest.get('mfu'))}"


def monitor_text(latest: Record, ui_cpu_frac: float | None) -> str:
    """What watching costs: the engine's metric time as a share of the interval, its host
    syncs per optimizer step, and (live) the UI thread's CPU share."""
    parts = []
    frac = latest.get("monitor_frac")
    if frac is not None:
        parts.append(f"monitor {frac * 100:.2f}%")
    syncs = latest.get("syncs_per_step")
    if syncs is not None:
        parts.append(f"{syncs:.2g} syncs/step")
    if ui_cpu_frac is not None:
        parts.append(f"UI {ui_cpu_frac * 100:.1f}% CPU")
    return "[$foreground-muted]" + " · ".join(parts) + "[/]" if parts else ""
