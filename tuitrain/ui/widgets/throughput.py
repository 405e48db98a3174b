"""Throughput panel: samples/s over steps with the current and mean rate, step time, the
achieved TFLOP/s and MFU, and what the monitor costs (engine and, live, the UI thread)."""

from __future__ import annotations

from collections.abc import Sequence

from tuitrain.metrics.format import format_mfu, format_tflops
from tuitrain.metrics.records import Record
from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.panels import steps_per_s, throughput_unit
from tuitrain.ui.ranks import rank_note, rank_table
from tuitrain.ui.view import Frame, format_rate, format_seconds, mean
from tuitrain.ui.widgets.chart import Line
from tuitrain.ui.widgets.panel import Panel, compact_layout

UNIT_SERIES = {"tokens": "tokens_per_s", "samples": "samples_per_s", "steps": "step_time_s"}
UNIT_SHORT = {"tokens": " tok/s", "samples": "/s", "steps": " steps/s"}


def rate_series(snap: Snapshot, unit: str) -> Series:
    """The throughput the panel charts: tokens/s or samples/s as measured; steps/s from the
    step time (a script's run: its batch is unknown)."""
    series = snap.get(UNIT_SERIES[unit])
    if unit != "steps":
        return series
    pts = [(x, r) for x, t in zip(series.xs, series.ys, strict=True) if (r := steps_per_s(t))]
    return Series(tuple(x for x, _ in pts), tuple(r for _, r in pts))


class ThroughputPanel(Panel):
    """Global samples/s (all ranks) as the engine measures it between log points, tokens/s
    for a task that counts tokens (a language model), steps/s for a script; under DDP or
    FSDP a per-rank table (step time, own work with the straggler flagged, memory, share of
    the step in collectives), with a row per node when the job spans several."""

    TITLE = "Throughput · samples/s"
    SERIES = ("samples_per_s", "tokens_per_s", "step_time_s")

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        unit = throughput_unit(snap)
        self.border_title = f"Throughput · {unit}/s"
        rate = rate_series(snap, unit)
        step_time = snap.get("step_time_s").last
        short = UNIT_SHORT[unit]
        now, avg = format_rate(rate.last), format_rate(mean(rate.ys))
        rates = f"[$success]now[/] [b]{now}[/b]{short}  mean {avg}"
        step = f"step {format_seconds(step_time)}"
        if unit == "tokens":
            samples = snap.get("samples_per_s").last
            step = f"{format_rate(samples)} samples/s · {step}"
        batch = (snap.header or {}).get("global_batch")
        batch_text = f" · {batch} samples/step" if batch and unit == "samples" else ""
        latest = snap.latest or {}
        flops = flops_text(latest)
        cost = monitor_text(latest, frame.ui_cpu_frac)
        if self.is_attached and compact_layout(self.screen):
            # Two lines at most: the per-rank table becomes one note, first on the line so
            # that a narrow panel's ellipsis does not hide it.
            # The FLOP rate before the step time: an ellipsis cuts the end of the line.
            note = rank_note(snap.latest)
            second = " · ".join(t for t in (note, flops, step, cost) if t)
            return f"{rates}\n{second}"
        text = "\n".join(t for t in (rates, step + batch_text, flops, cost) if t)
        ranks = rank_table(snap.latest, self.summary_text.content_size.width or None)
        return f"{text}\n{ranks}" if ranks else text

    def lines(self, snap: Snapshot, buckets: int) -> Sequence[Line]:
        series = rate_series(snap, throughput_unit(snap))
        return (Line(*series.decimate(buckets), color="success"),)

    def spark_series(self, snap: Snapshot) -> Series:
        return rate_series(snap, throughput_unit(snap))


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
