"""Metrics panel: the run's own metrics (a task's, a script's keys), then lr and the grad
norm, one row each: name, last value (significant digits at any magnitude) and a sparkline
whose range never turns a 1% wobble into a cliff."""

from __future__ import annotations

from rich.cells import cell_len

from tuitrain.metrics.store import Snapshot
from tuitrain.ui.panels import (
    is_script_run,
    metric_label,
    metric_text,
    panel_metric_specs,
    spark_bars,
)
from tuitrain.ui.view import Frame, no_scaler_reason
from tuitrain.ui.widgets.panel import Panel, esc

NAME_CELLS = 16  # a longer name is cut with an ellipsis
VALUE_CELLS = 10
SPARK_POINTS = 64  # points a row's sparkline is drawn from (decimated)


def cut(text: str, cells: int) -> str:
    """`text` in at most `cells` cells: cut with an ellipsis when longer."""
    if cell_len(text) <= cells:
        return text
    out = ""
    for char in text:
        if cell_len(out + char) > cells - 1:
            break
        out += char
    return out + "…"


def metric_rows(snap: Snapshot, width: int) -> list[str]:
    """One content-markup row per metric, `width` cells wide at most."""
    specs = panel_metric_specs(snap)
    if not specs:
        return []
    names = [metric_label(s) for s in specs]  # `val_top1 (eval_top1)`: the script's name too
    name_cells = min(NAME_CELLS, max(cell_len(n) for n in names))
    spark_cells = max(0, width - name_cells - VALUE_CELLS - 2)
    rows = []
    for spec in specs:
        series = snap.get(spec["name"])
        value = metric_text(series.last, spec)
        name = cut(metric_label(spec), name_cells)
        row = f"[$foreground-muted]{esc(name.ljust(name_cells))}[/] {esc(value.rjust(VALUE_CELLS))}"
        if spark_cells >= 4 and len(series) > 1:
            _xs, ys = series.decimate(SPARK_POINTS)
            color = "$warning" if spec["name"].startswith("val_") else "$primary"
            row += f" [{color}]{spark_bars(ys, min(spark_cells, len(ys)))}[/]"
        rows.append(row)
    return rows


class MetricsPanel(Panel):
    """The run's own metrics as rows with sparklines (the `g` screen charts each one)."""

    TITLE = "Metrics"
    HAS_CHART = False

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        rows = metric_rows(snap, self.summary_text.content_size.width or 40)
        if not rows:
            rows = ["[$foreground-muted]waiting for the first log point[/]"]
        header = snap.header or {}
        precision = header.get("precision")
        if no_scaler_reason(precision) is not None and not is_script_run(header):
            rows.append(f"[$foreground-muted]no GradScaler with {esc(precision)}[/]")
        rows.append("[$foreground-muted]g: a chart of each[/]")
        return "\n".join(rows)
