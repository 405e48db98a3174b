"""Run overview panel: config and environment (model, data, optimizer, versions, run dir)."""

from __future__ import annotations

from tuitrain.metrics.format import DASH, format_value
from tuitrain.ui.view import Frame, as_number, config_section, human_count
from tuitrain.ui.widgets.panel import Panel, esc


def _fmt_lr(value: object) -> str:
    number = as_number(value)
    return format_value(number) if number is not None else esc(value if value is not None else DASH)


def _fmt_config(value: object) -> str:
    """A configured number as people write it (0.003, 1e-05); text that reads as a number
    as that number; anything else as text."""
    number = as_number(value)
    return f"{number:g}" if number is not None else esc(value if value is not None else DASH)


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
        grad_norm = as_number(latest.get("grad_norm"))
        norm_text = format_value(grad_norm)
        warmup = optim.get("warmup_steps")
        accum = optim.get("grad_accum", 1)
        accum_n = as_number(accum)
        smoothing = config_section(snap, "train").get("label_smoothing")
        params = as_number(header.get("params"))
        lines = [
            f"[$foreground-muted]model[/] {esc(model.get('name', DASH))} · "
            f"{human_count(params)} params",
            f"[$foreground-muted]data[/] {esc(header.get('data') or data.get('name', DASH))}",
            f"[$foreground-muted]batch[/] {esc(data.get('batch_size', DASH))}"
            + (f" x {esc(accum)} accum" if accum is not None and accum_n != 1 else "")
            + f" · global {esc(header.get('global_batch', DASH))}"
            + f" · {esc(header.get('steps_per_epoch', DASH))} steps/epoch",
            f"[$foreground-muted]optim[/] {esc(optim.get('name', DASH))} lr "
            f"{_fmt_config(optim.get('lr'))} {esc(optim.get('schedule', ''))}"
            + (f", warmup {esc(warmup)}" if warmup else "")
            + (f" · label smoothing {esc(smoothing)}" if smoothing else ""),
            f"[$foreground-muted]now[/] lr {_fmt_lr(latest.get('lr'))} · grad norm {norm_text}",
            f"[$foreground-muted]env[/] torch {esc(header.get('torch', DASH))} · py "
            f"{esc(header.get('python', DASH))} · tuitrain {esc(header.get('tuitrain', DASH))}",
            f"[$foreground-muted]dir[/] {esc(header.get('run_dir') or DASH)}",
        ]
        return "\n".join(lines)
