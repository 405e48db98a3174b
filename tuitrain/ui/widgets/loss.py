"""Loss panel: smoothed train loss per step, validation loss per epoch, validation accuracy.

`l` (the app's `toggle_log_y`) puts the chart's y axis on a log scale and back; the title
says which ("Loss · log y"), and the compact layout's sparkline follows (log10 of the loss).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tuitrain.metrics.format import DASH, format_value
from tuitrain.metrics.records import eval_metric_items, task_declaration
from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.panels import (
    declared_metrics,
    eval_label,
    is_script_run,
    metric_spec,
    metric_unit,
)
from tuitrain.ui.view import Frame, smoothed_series
from tuitrain.ui.widgets.chart import Line, log_title
from tuitrain.ui.widgets.panel import Panel, esc


def _fmt_loss(value: float | None) -> str:
    return format_value(value)


def smoothing_floor(snap: Snapshot) -> float | None:
    """The least training loss label smoothing allows: the entropy of the smoothed target
    (eps/K on each class, 1 - eps + eps/K on the true one), or None without smoothing."""
    config = (snap.header or {}).get("config") or {}
    try:
        eps = float(config["train"]["label_smoothing"])
        k = int(config["data"]["num_classes"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (0 < eps < 1 and k >= 2):
        return None
    on, off = 1 - eps + eps / k, eps / k
    return -(on * math.log(on) + (k - 1) * off * math.log(off))


def best_eval(snap: Snapshot) -> Mapping[str, Any] | None:
    """The evaluation with the best primary metric so far (the first of equals): the
    highest accuracy for classification, by the header's task declaration otherwise."""
    task = task_declaration(snap.header)
    key = task["primary"]
    if key is None:
        return None
    scored = [e for e in snap.evals if isinstance(e.get(key), (int, float))]
    if not scored:
        return None
    pick = max if task["mode"] == "max" else min
    return pick(scored, key=lambda e: e[key])


def shown_metric(snap: Snapshot) -> tuple[str, str, str] | None:
    """(field, label, format) of the validation metric the Loss panel shows beside the val
    loss: the task's primary metric (classification: accuracy), or its first other
    validation metric when the primary is the loss itself."""
    task = task_declaration(snap.header)
    vals = [m for m in task["metrics"] if m["split"] == "val" and m["name"] != "val_loss"]
    primary = next((m for m in vals if m["name"] == task["primary"]), None)
    chosen = primary or (vals[0] if vals else None)
    if chosen is None:
        return None
    return chosen["name"], chosen["name"].removeprefix("val_"), chosen["format"]


def first_metric(
    ev: Mapping[str, Any], header: Mapping[str, Any] | None
) -> tuple[str, str, str] | None:
    """(field, label, format) of the first validation metric other than the loss that `ev`
    holds a value of: what a script's evaluation shows where its task declares none."""
    declared = declared_metrics(header)
    for name, value in eval_metric_items(ev):
        if name != "val_loss" and value is not None:
            return name, name.removeprefix("val_"), metric_spec(name, declared)["format"]
    return None


class LossPanel(Panel):
    """Raw train loss (muted), its EMA (primary) and validation loss points (warning)."""

    TITLE = "Loss"
    SERIES = ("loss", "val_loss")

    @property
    def log_y(self) -> bool:
        return self.chart.log_y

    def toggle_log_y(self) -> bool:
        """Log y on or off; redrawn at the next poll of the plots. Returns the new mode."""
        log = self.chart.log_y = not self.chart.log_y
        self.border_title = log_title(self.TITLE, log)
        self._plot_key = self._spark_key = None  # the mode is not in the redraw keys
        return log

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        loss = snap.get("loss")
        smooth = smoothed_series(loss).last if len(loss) else None
        line1 = (
            f"[$primary]train[/] {_fmt_loss(smooth)} [$foreground-muted](smoothed; "
            f"last {_fmt_loss(loss.last)})[/]"
        )
        floor = smoothing_floor(snap)
        if floor is not None:
            line1 += f" [$foreground-muted]· floor {floor:.3f} (smoothing)[/]"
        ev = snap.last_eval
        if ev is None:
            first = "evaluation" if is_script_run(snap.header) else "epoch"
            return line1 + f"\n[$warning]val[/] [$foreground-muted]after the first {first}[/]"
        shown = shown_metric(snap) or first_metric(ev, snap.header)
        metric = ""
        if shown is not None:
            key, label, fmt = shown
            value = ev.get(key)
            value = value if isinstance(value, (int, float)) else None
            shown_value = format_value(value, fmt) if value is not None else DASH
            metric = f"[b]{esc(label)} {shown_value}[/b] "
        unit = metric_unit(metric_spec("val_loss", declared_metrics(snap.header)))
        val = ev.get("val_loss")
        where = eval_label(ev).removesuffix(" done").removeprefix("eval at ")
        # what the evaluation has: a script that logs `val/acc` alone reads "val acc 98.44%"
        loss_text = f"{_fmt_loss(val)}{unit if val is not None else ''}  "
        loss_text = "" if val is None and metric else loss_text
        text = f"{line1}\n[$warning]val[/] {loss_text}{metric}[$foreground-muted]({esc(where)})[/]"
        best = best_eval(snap)
        task = task_declaration(snap.header)
        primary = task["primary"]
        if best is not None and best is not ev and primary is not None:
            fmt = next((m["format"] for m in task["metrics"] if m["name"] == primary), "float")
            label = "best" if shown is not None and shown[0] == primary else f"best {esc(primary)}"
            text += (
                f" [$foreground-muted]· {label} {format_value(best[primary], fmt)}"
                f" ({esc(eval_label(best).removesuffix(' done').removeprefix('eval at '))})[/]"
            )
        return text

    def lines(self, snap: Snapshot, buckets: int) -> Sequence[Line]:
        loss = snap.get("loss")
        raw = Line(*loss.decimate(buckets), color="foreground-darken-3")
        smooth = Line(*smoothed_series(loss).decimate(buckets), color="primary")
        val = Line(*snap.get("val_loss").decimate(buckets), color="warning", scatter=True)
        return (raw, smooth, val)

    def spark_series(self, snap: Snapshot) -> Series:
        series = smoothed_series(snap.get("loss"))
        if not self.log_y:
            return series
        pts = [(x, math.log10(y)) for x, y in zip(series.xs, series.ys, strict=True) if y > 0]
        return Series(tuple(x for x, _ in pts), tuple(y for _, y in pts))
