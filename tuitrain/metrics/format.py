"""Human-readable, one-line renderings of records, shared by the console sink and the UI.

Pure functions, no I/O: each takes a record mapping (see the record contract) and
returns a string. Fields that are missing or None are left out of the line.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from tuitrain.metrics.numbers import DASH, format_value
from tuitrain.metrics.records import (
    CLASSIFY_DECLARATION,
    Record,
    eval_metric_items,
    format_metric,
    task_declaration,
    train_metric_items,
)

__all__ = [
    "DASH",
    "format_end_line",
    "format_eval_line",
    "format_event_line",
    "format_header_line",
    "format_mfu",
    "format_number",
    "format_record",
    "format_tflops",
    "format_train_line",
    "format_value",
    "human_bytes",
    "is_error_record",
]

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: float | None) -> str:
    """``1288490188`` -> ``"1.20 GiB"``, ``851443712`` -> ``"812 MiB"``, None -> ``"—"``."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return DASH
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    i = 0
    value /= 1024
    while abs(value) >= 1024 and i < len(_UNITS) - 1:
        value /= 1024
        i += 1
    unit = _UNITS[i]
    if unit in ("KiB", "MiB"):
        return f"{value:.0f} {unit}"
    return f"{value:.2f} {unit}"


def format_number(value: Any, digits: int = 2) -> str:
    """Integral values without decimals (``1.0`` -> ``"1"``), others with ``digits``."""
    if value is None:
        return DASH
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{digits}f}"


def _onoff(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return DASH if value is None else str(value)


def format_tflops(value: float | None) -> str:
    """Achieved TFLOP/s with three significant digits: ``0.0104 TFLOP/s``, ``412 TFLOP/s``."""
    if value is None or not math.isfinite(value):
        return f"{DASH} TFLOP/s"
    return f"{value:.3g} TFLOP/s" if value < 1000 else f"{value:,.0f} TFLOP/s"


def format_mfu(value: float | None) -> str:
    """``MFU 41.2%``, or ``MFU —`` where no peak is known (CPU without --measure-peak)."""
    if value is None or not math.isfinite(value):
        return f"MFU {DASH}"
    return f"MFU {value * 100:.1f}%"


def format_duration(seconds: float | None) -> str:
    """``75`` -> ``"1:15"``, ``3725`` -> ``"1:02:05"``, None -> ``"—"``."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return DASH
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


ETA_WINDOW = 5  # step times the ETA takes the median of (one slow interval does not swing it)


def eta_seconds(total: int | None, step: int | None, step_times: Sequence[float]) -> float | None:
    """Time left: the steps to go times the median of the last ETA_WINDOW step times; None
    when the total, the step or any finite step time is unknown. The dashboard's progress bar
    and the headless lines both say this."""
    recent = [t for t in list(step_times)[-ETA_WINDOW:] if math.isfinite(t)]
    if not total or step is None or not recent:
        return None
    return max(0, total - step) * statistics.median(recent)


def precision_label(rec: Record) -> str:
    """The header's precision as users should read it: "fp32 (TF32)" where fp32 matmuls and
    convolutions run as TF32 (Ampere+ GPUs with train.tf32), which is not full fp32."""
    precision = rec.get("precision") or DASH
    if rec.get("tf32") and precision == "fp32":
        return "fp32 (TF32)"
    return str(precision)


def format_header_line(rec: Record) -> str:
    """``tuitrain 0.1.0 | preset mnist | device cuda (NVIDIA H200) | precision bf16 | ...``."""
    device = str(rec.get("device") or DASH)
    name = rec.get("device_name")
    if name and name != device:
        device = f"{device} ({name})"
    parts = [f"tuitrain {rec['tuitrain']}" if rec.get("tuitrain") else "tuitrain"]
    parts.append(f"preset {rec.get('preset') or DASH}")
    parts.append(f"device {device}")
    parts.append(f"precision {precision_label(rec)}")
    parts.append(f"compile {_onoff(rec.get('compile'))}")
    parts.append(f"world_size {world_label(rec, 1)}")
    if rec.get("torch"):
        parts.append(f"torch {rec['torch']}")
    return " | ".join(parts)


def world_label(header: Record, missing: object = DASH) -> str:
    """The header's world size, with how the model is spread over the ranks beside it when
    there are more than one (``2 (fsdp)``); `missing` where the header has none."""
    world = header.get("world_size")
    if world is None:
        return str(missing)
    config = header.get("config")
    dist = config.get("distributed") if isinstance(config, dict) else None
    strategy = dist.get("strategy") if isinstance(dist, dict) else None
    return f"{world} ({strategy})" if isinstance(strategy, str) and world != 1 else str(world)


def format_train_line(rec: Record, total: int | None = None, eta_s: float | None = None) -> str:
    """``step   120 | epoch 0.51 | loss 0.5123 | lr 1.00e-03 | 12,345 samples/s | ...``.

    With `total` the step reads ``step   120/600``, and with `eta_s` the line ends with
    ``ETA 1:15`` (the dashboard's progress bar, in a log). Memory shows CUDA allocated (and
    peak) memory, or host RSS when the CUDA fields are None; the loss scale is shown only
    when ``grad_scale`` is not None.
    """
    step = rec.get("step")
    of = f"/{total}" if total else ""
    parts = [f"step {step if step is not None else DASH:>5}{of}"]
    epoch = rec.get("epoch")
    if epoch is not None:
        parts.append(f"epoch {epoch:.2f}")
    loss = rec.get("loss")
    parts.append(f"loss {format_value(loss)}")
    for name, value in train_metric_items(rec):  # the task's own train metrics
        parts.append(f"{name} {format_metric(value)}")
    lr = rec.get("lr")
    if lr is not None:
        parts.append(f"lr {lr:.2e}")
    sps = rec.get("samples_per_s")
    if sps is not None and math.isfinite(sps):
        parts.append(f"{sps:,.0f} samples/s")
    tps = rec.get("tokens_per_s")
    if isinstance(tps, (int, float)) and math.isfinite(tps):
        parts.append(f"{tps:,.0f} tokens/s")
    tflops = rec.get("tflops")
    if tflops is not None and math.isfinite(tflops):
        parts.append(format_tflops(tflops))
        if rec.get("mfu") is not None:
            parts.append(format_mfu(rec["mfu"]))
    wait = rec.get("data_wait_frac")
    if wait is not None:
        parts.append(f"data wait {wait * 100:4.1f}%")
    alloc = rec.get("mem_alloc_bytes")
    if alloc is not None:
        mem = f"mem {human_bytes(alloc)} alloc"
        peak = rec.get("mem_peak_bytes")
        if peak is not None:
            mem += f" (peak {human_bytes(peak)})"
        parts.append(mem)
    elif rec.get("host_rss_bytes") is not None:
        parts.append(f"rss {human_bytes(rec['host_rss_bytes'])}")
    scale = rec.get("grad_scale")
    if scale is not None:
        parts.append(f"scale {format_number(scale, 1)}")
    skipped = rec.get("skipped_steps")
    if skipped:
        parts.append(f"skipped {skipped}")
    if eta_s is not None:
        parts.append(f"ETA {format_duration(eta_s)}")
    return " | ".join(parts)


def metric_formats(header: Record | None = None) -> dict[str, str]:
    """Each metric's format (pct or float) from the header's task declaration; an old header
    (or none) reads as classification's, whose declaration also formats an undeclared
    accuracy (CLASSIFY_PRIMARY, the client's name for a script's `val/acc`: a share, shown
    as a percentage)."""
    base = {m["name"]: m["format"] for m in CLASSIFY_DECLARATION["metrics"]}
    return base | {m["name"]: m["format"] for m in task_declaration(header)["metrics"]}


def format_eval_line(rec: Record, header: Record | None = None) -> str:
    """``eval  step 234 | epoch 1 | val_loss 0.4012 | val_bpc 1.842``: the validation loss,
    then each validation metric the record holds, formatted as its header declares (a
    classifier's accuracy as ``85.31%``)."""
    formats = metric_formats(header)
    parts = [f"eval  step {rec.get('step', DASH)}"]
    if rec.get("epoch") is not None:
        parts.append(f"epoch {format_number(rec['epoch'])}")
    val_loss = rec.get("val_loss")
    parts.append(f"val_loss {format_value(val_loss)}")
    for name, value in eval_metric_items(rec):  # the task's validation metrics
        if name != "val_loss" and value is not None:
            parts.append(f"{name} {format_metric(value, formats.get(name, 'float'))}")
    return " | ".join(parts)


def format_event_line(rec: Record) -> str:
    """``message`` for info, ``warning: message`` / ``error: message`` otherwise."""
    level = str(rec.get("level") or "info")
    message = str(rec.get("message", ""))
    return message if level == "info" else f"{level}: {message}"


def format_end_line(rec: Record, header: Record | None = None) -> str:
    """``end   completed | reason max_steps reached | step 1000 | val_bpc 1.842``: the
    primary metric the header declares, where the end record holds it."""
    parts = [f"end   {rec.get('status') or DASH}"]
    if rec.get("reason"):
        parts.append(f"reason {rec['reason']}")
    if rec.get("step") is not None:
        parts.append(f"step {rec['step']}")
    task = task_declaration(header)
    key = task["primary"]
    if key and isinstance(rec.get(key), (int, float)):
        parts.append(f"{key} {format_metric(rec[key], metric_formats(header).get(key, 'float'))}")
    if rec.get("weights_digest"):
        parts.append(f"weights {rec['weights_digest']}")
    return " | ".join(parts)


_FORMATTERS = {
    "header": format_header_line,
    "train": format_train_line,
    "eval": format_eval_line,
    "event": format_event_line,
    "end": format_end_line,
}


def format_record(rec: Record, header: Record | None = None) -> str | None:
    """The one-line rendering of any record, or None for an unknown type; eval and end lines
    format their metrics as `header` (the run's) declares."""
    kind = str(rec.get("type"))
    if kind == "eval":
        return format_eval_line(rec, header)
    if kind == "end":
        return format_end_line(rec, header)
    formatter = _FORMATTERS.get(kind)
    return formatter(rec) if formatter else None


def is_error_record(rec: Record) -> bool:
    """True for warning/error events (they belong on stderr)."""
    return rec.get("type") == "event" and rec.get("level") in ("warning", "error")
