"""GradScaler panel: the fp16 loss scale on a log2 axis, skipped steps, the last overflow;
with bf16 or fp32 it says why there is no scaler instead of staying blank."""

from __future__ import annotations

import math

from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.view import Frame, last_overflow_step, no_scaler_reason
from tuitrain.ui.widgets.chart import Line, MetricChart
from tuitrain.ui.widgets.panel import Panel, esc


def precision_advice(snap: Snapshot) -> str | None:
    """The run's precision advice (fp16 skipping where bf16 is native, bf16 emulated), if any."""
    for event in reversed(snap.events):
        if event.get("kind") in ("advice", "precision") and event.get("message"):
            return str(event["message"])
    return None


def log2_series(series: Series) -> Series:
    xs, ys = [], []
    for x, y in zip(series.xs, series.ys, strict=True):
        if y > 0:
            xs.append(x)
            ys.append(math.log2(y))
    return Series(tuple(xs), tuple(ys))


class ScalerPanel(Panel):
    """fp16 runs: log2(scale) over steps; other precisions: the reason there is none."""

    TITLE = "GradScaler · log2 scale"
    SERIES = ("grad_scale",)

    @staticmethod
    def precision(snap: Snapshot) -> str | None:
        value = (snap.header or {}).get("precision")
        return str(value) if value is not None else None

    def has_chart(self, snap: Snapshot) -> bool:
        return no_scaler_reason(self.precision(snap)) is None

    def summary(self, frame: Frame) -> str:
        text = self.scaler_text(frame)
        advice = precision_advice(frame.snap)
        return f"{text.rstrip()}\n[$warning]advice:[/] {esc(advice)}" if advice else text

    def scaler_text(self, frame: Frame) -> str:
        snap = frame.snap
        reason = no_scaler_reason(self.precision(snap))
        if reason is not None:
            return f"[$foreground-muted]{reason}[/]"
        scale = snap.get("grad_scale").last
        if scale is None:
            waiting = "waiting for the first log point" if snap.header else "waiting for the run"
            return f"[$foreground-muted]{waiting}[/]\n"
        skipped = snap.get("skipped_steps")
        count = int(skipped.last or 0)
        overflow = last_overflow_step(skipped)
        exp = f"2^{math.log2(scale):.0f}" if scale > 0 else "0"
        skipped_text = f"[$warning]skipped {count}[/]" if count else "skipped 0"
        last = f"last overflow at step {overflow}" if overflow is not None else "no overflow yet"
        return f"[$accent]scale[/] {exp} = {scale:,.0f}  {skipped_text}\n{last}"

    def plot(self, chart: MetricChart, snap: Snapshot, buckets: int) -> None:
        xs, ys = log2_series(snap.get("grad_scale")).decimate(buckets)
        ticks = None
        if ys:
            lo, hi = math.floor(min(ys)), math.ceil(max(ys))
            step = max(1, math.ceil((hi - lo) / 3))
            ticks = [(float(e), f"2^{e}") for e in range(lo, hi + 1, step)]
        chart.draw(
            [Line(xs, ys, color="accent")],
            ylim=(float(ticks[0][0]), float(ticks[-1][0])) if ticks else None,
            yticks=ticks,
        )

    def spark_series(self, snap: Snapshot) -> Series:
        return log2_series(snap.get("grad_scale"))
