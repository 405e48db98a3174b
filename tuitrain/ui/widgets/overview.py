"""Run overview panel: config and environment (model, data, optimizer, versions, run dir)."""

from __future__ import annotations

from tuitrain.metrics.format import DASH
from tuitrain.ui.view import Frame, config_section, human_count
from tuitrain.ui.widgets.panel import Panel, esc


def _fmt_lr(value: object) -> str:
    return f"{value:.2e}" if isinstance(value, (int, float)) else DASH


class OverviewPanel(Panel):
    """What is being trained, with what, where: the W&B-style run overview, as text."""

    TITLE = "Run"
    HAS_CHART = False

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        header = snap.header
        if header is None:
            return "[$foreground-muted]building the model and loading data…[/]"
        model = config_section(snap, "model")
        data = config_section(snap, "data")
        optim = config_section(snap, "optim")
        latest = snap.latest or {}
        grad_norm = latest.get("grad_norm")
        norm_text = f"{grad_norm:.3g}" if isinstance(grad_norm, (int, float)) else DASH
        warmup = optim.get("warmup_steps")
        accum = optim.get("grad_accum", 1)
        smoothing = config_section(snap, "train").get("label_smoothing")
        lines = [
            f"[$foreground-muted]model[/] {esc(model.get('name', DASH))} · "
            f"{human_count(header.get('params'))} params",
            f"[$foreground-muted]data[/] {esc(header.get('data') or data.get('name', DASH))}",
            f"[$foreground-muted]batch[/] {data.get('batch_size', DASH)}"
            + (f" x {accum} accum" if accum and accum > 1 else "")
            + f" · global {header.get('global_batch', DASH)}"
            + f" · {header.get('steps_per_epoch', DASH)} steps/epoch",
            f"[$foreground-muted]optim[/] {optim.get('name', DASH)} lr {_fmt_lr(optim.get('lr'))} "
            f"{optim.get('schedule', '')}"
            + (f", warmup {warmup}" if warmup else "")
            + (f" · label smoothing {smoothing}" if smoothing else ""),
            f"[$foreground-muted]now[/] lr {_fmt_lr(latest.get('lr'))} · grad norm {norm_text}",
            f"[$foreground-muted]env[/] torch {header.get('torch', DASH)} · py "
            f"{header.get('python', DASH)} · tuitrain {header.get('tuitrain', DASH)}",
            f"[$foreground-muted]dir[/] {esc(header.get('run_dir') or DASH)}",
        ]
        return "\n".join(lines)
