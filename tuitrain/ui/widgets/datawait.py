"""Data-wait panel: the share of step time spent waiting for the loader, a verdict (ok,
warning above 10%, input-bound above 20%) and the hint that fits this run's loader."""

from __future__ import annotations

from tuitrain.metrics.records import data_wait_verdict
from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.view import Frame, config_section
from tuitrain.ui.widgets.chart import Line, MetricChart
from tuitrain.ui.widgets.panel import Panel, esc

VERDICT_COLOR = {"ok": "success", "warning": "warning", "input-bound": "error"}


class DataWaitPanel(Panel):
    """Percent of each log interval blocked in `next(loader)`, with the 10%/20% guides."""

    TITLE = "Data wait · % of step time"
    SERIES = ("data_wait_frac",)

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        frac = snap.get("data_wait_frac").last
        header = snap.header or {}
        verdict, hint = data_wait_verdict(frac, config_section(snap, "data"), header.get("device"))
        if frac is None:
            return "[$foreground-muted]waiting for the first log point[/]\n"
        color = VERDICT_COLOR.get(verdict, "foreground")
        loader = config_section(snap, "data").get("loader")
        loader_text = f" [$foreground-muted]· {esc(loader)} loader[/]" if loader else ""
        second = f"[$foreground-muted]{esc(hint or 'the input keeps up')}[/]"
        return f"{frac * 100:.1f}% · [b][${color}]{verdict}[/][/b]{loader_text}\n{second}"

    def plot(self, chart: MetricChart, snap: Snapshot, buckets: int) -> None:
        xs, ys = snap.get("data_wait_frac").decimate(buckets)
        pct = [y * 100 for y in ys]
        top = max([25.0, *pct])
        chart.draw(
            [Line(xs, pct, color="secondary")],
            hlines=[(10.0, "warning"), (20.0, "error")],
            ylim=(0.0, top),
            yticks=[(0.0, "0%"), (10.0, "10%"), (20.0, "20%")]
            + ([(top, f"{top:.0f}%")] if top > 30 else []),
        )

    def spark_series(self, snap: Snapshot) -> Series:
        self.spark.floor = (0.0, 0.25)  # as the chart: 0 to 25% at least
        return snap.get("data_wait_frac")
