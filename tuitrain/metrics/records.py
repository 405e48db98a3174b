"""The metric contract in code: record builders, the train record's fields, and the verdicts
that the engine and the UI share. No torch, no Textual: the UI, `watch` and the engine all
import it.

Every record is one JSON object, `"type"` first: `header`, `train`, `eval`, `event`, `end`.
A field that does not apply is None (null), never a fake number. README.md ("The metric
contract") says what each field means.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

Record = Mapping[str, Any]

# --------------------------------------------------------------------------- train records

# What one train record holds, in order (under DDP `rank_step_time_s` and `rank_busy_s` follow;
# one process has `rank_step_time_s` only).
TELEMETRY_FIELDS = (
    "mem_alloc_bytes",
    "mem_reserved_bytes",
    "mem_peak_bytes",
    "host_rss_bytes",
    "gpu_util_pct",
    "gpu_mem_used_bytes",
)
# Achieved FLOP rate and MFU, then what the monitor itself cost in the interval.
MONITOR_FIELDS = (
    "tflops",
    "mfu",
    "host_syncs",
    "syncs_per_step",
    "monitor_s",
    "monitor_frac",
)
TRAIN_FIELDS = (
    "type",
    "step",
    "epoch",
    "samples",
    "loss",
    "lr",
    "samples_per_s",
    "step_time_s",
    "data_wait_s",
    "data_wait_frac",
    *TELEMETRY_FIELDS,
    "grad_scale",
    "skipped_steps",
    "grad_norm",
    *MONITOR_FIELDS,
)
# How DDP merges each rank's figure into rank 0's record (one all-gather per log point):
# `busy_s` (this rank's data wait + forward per step) becomes the per-rank list `rank_busy_s`,
# `step_time_s` also the per-rank list `rank_step_time_s`.
RANK_MERGE: dict[str, str] = {
    "samples_per_s": "sum",
    "loss": "mean",
    "step_time_s": "max",
    "data_wait_frac": "max",
    "host_rss_bytes": "max",
    "mem_peak_bytes": "max",
    "mem_alloc_bytes": "max",
    "mem_reserved_bytes": "max",
    "busy_s": "per-rank",
    "tflops": "sum",
    "mfu": "mean",
    "host_syncs": "max",
    "syncs_per_step": "max",
    "monitor_s": "max",
    "monitor_frac": "max",
}


def train_record(
    *,
    step: int,
    epoch: float,
    samples: int,
    loss: float | None,
    lr: float,
    samples_per_s: float,
    step_time_s: float,
    data_wait_s: float,
    data_wait_frac: float,
    telemetry: Mapping[str, int | float | None],
    grad_scale: float | None,
    skipped_steps: int | None,
    grad_norm: float | None,
    monitor: Mapping[str, int | float | None] | None = None,
) -> dict[str, Any]:
    """A train record with every field of TRAIN_FIELDS, in that order (`monitor`: the
    MONITOR_FIELDS, each null when absent)."""
    monitor = monitor or {}
    unknown = (set(telemetry) - set(TELEMETRY_FIELDS)) | (set(monitor) - set(MONITOR_FIELDS))
    if unknown:
        raise ValueError(f"telemetry or monitor fields outside the contract: {sorted(unknown)}")
    return {
        "type": "train",
        "step": step,
        "epoch": round(epoch, 4),
        "samples": samples,
        "loss": loss if loss is not None and math.isfinite(loss) else None,
        "lr": lr,
        "samples_per_s": samples_per_s,
        "step_time_s": step_time_s,
        "data_wait_s": data_wait_s,
        "data_wait_frac": data_wait_frac,
        **{name: telemetry.get(name) for name in TELEMETRY_FIELDS},
        "grad_scale": grad_scale,
        "skipped_steps": skipped_steps,
        "grad_norm": grad_norm,
        **{name: monitor.get(name) for name in MONITOR_FIELDS},
    }


# Fields a train record may hold beside TRAIN_FIELDS: the per-rank lists (DDP) and
# `tokens_per_s` (a task that counts tokens). Any other field of a train record is one of the
# task's own train metrics, which the header's `task.metrics` declares.
TRAIN_EXTRA_FIELDS = ("rank_step_time_s", "rank_busy_s", "tokens_per_s", "dropped_fields")


# Every field name the contract itself writes in a train or eval record. A user's key or a
# task metric of one of these names never becomes that field: it is kept under
# `user_field(name)` (`user/<name>`), so `{"type": 3}` or nanoGPT's `mfu` (in percent) can
# neither hide a record nor replace the engine's measurement.
CONTRACT_FIELDS = frozenset(
    {*TRAIN_FIELDS, *TRAIN_EXTRA_FIELDS, "busy_s", "time", "rank"}
)
USER_PREFIX = "user/"


def user_field(name: str) -> str:
    """The record field a user's metric `name` is written under: itself, or `user/<name>`
    when the contract has a field of that name."""
    return USER_PREFIX + name if name in CONTRACT_FIELDS else name


# --------------------------------------------------------------------------- limits

# One definition of what a record may be: writers (the engine's sinks, the client,
# `tuitrain run`) keep within it, and every reader reads at least this much of a line.
MAX_RECORD_BYTES = 256 * 1024  # one JSON line of a train, eval, event or end record
MAX_HEADER_BYTES = 1 << 20  # the header line (its config): 1 MiB
STEP_MAX = 2**63 - 1  # a step is an integer in 0..STEP_MAX (an int64: every reader's x axis)


def valid_step(value: object) -> bool:
    """An integer step every reader can place: 0 <= step <= STEP_MAX (no bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= STEP_MAX


def plain_number(value: object) -> float | None:
    """A real number as a float: int, float and bool, numpy's scalars and 0-d arrays, any
    one-element value whose `.item()` gives a real number. None for anything else (text,
    complex, containers, several elements); never raises."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int beyond a float
            return math.inf if value > 0 else -math.inf

    try:
        if isinstance(value, numbers.Real):  # numpy's float32, int64 ... (registered Reals)
            return float(value)
        item = getattr(value, "item", None)
        if item is None or isinstance(value, (str, bytes)):
            return None
        size = getattr(value, "size", None)
        if isinstance(size, int) and size != 1:
            return None
        got = item()
    except Exception:  # noqa: BLE001 - a foreign object's item() may raise anything
        return None
    if got is value or isinstance(got, complex):
        return None
    return plain_number(got) if isinstance(got, (bool, int, float, numbers.Real)) else None


# --------------------------------------------------------------------------- task metrics

# A run written before tasks existed (no `task` in its header) is a classification run.
CLASSIFY_DECLARATION: dict[str, Any] = {
    "name": "classify",
    "primary": "val_acc",
    "mode": "max",
    "tolerance": 0.005,
    "metrics": [
        {"name": "val_loss", "split": "val", "goal": "min", "format": "float", "unit": "nats"},
        {"name": "val_acc", "split": "val", "goal": "max", "format": "pct", "unit": ""},
    ],
}


def task_declaration(header: Mapping[str, Any] | None) -> dict[str, Any]:
    """The header's `task` (what is trained, its primary metric and every metric's goal and
    format), read defensively: a foreign or altered header gives what it can, an old one
    the classification task's."""
    raw = (header or {}).get("task")
    if not isinstance(raw, Mapping):
        return dict(CLASSIFY_DECLARATION)
    metrics = []
    for spec in raw.get("metrics") or []:
        if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
            metrics.append(
                {
                    "name": spec["name"][:64],
                    "split": "val" if spec.get("split") == "val" else "train",
                    "goal": spec.get("goal") if spec.get("goal") in ("min", "max") else None,
                    "format": "pct" if spec.get("format") == "pct" else "float",
                    "unit": str(spec.get("unit") or "")[:32],
                }
            )
    primary = raw.get("primary")
    tolerance = raw.get("tolerance")
    return {
        "name": str(raw.get("name") or "custom")[:200],
        "primary": primary if isinstance(primary, str) else None,
        "mode": "max" if raw.get("mode") == "max" else "min",
        "tolerance": tolerance if _is_number(tolerance) and tolerance > 0 else None,  # type: ignore[operator]
        "metrics": metrics,
    }


def train_metric_items(rec: Mapping[str, Any]) -> list[tuple[str, float | None]]:
    """The task's own metrics of a train record (every field outside the contract whose
    value is a number or null), in record order."""
    known = set(TRAIN_FIELDS) | set(TRAIN_EXTRA_FIELDS)
    return [
        (k, v)
        for k, v in rec.items()
        if k not in known and (v is None or (_is_number(v) and math.isfinite(v)))
    ]


def eval_metric_items(rec: Mapping[str, Any]) -> list[tuple[str, float | None]]:
    """The validation metrics of an eval record (`val_*` fields), in record order."""
    return [
        (k, v)
        for k, v in rec.items()
        if k.startswith("val_") and (v is None or (_is_number(v) and math.isfinite(v)))
    ]


def format_metric(value: float | None, fmt: str = "float") -> str:
    """A metric as the dashboard and the log lines show it: pct as 85.31%, else 4 digits."""
    if value is None:
        return "–"
    if fmt == "pct":
        return f"{value * 100:.2f}%"
    if 1e4 <= abs(value) < 1e15:
        return f"{value:,.0f}"  # a rate: 28,652
    return f"{value:.4f}" if 1e-3 <= abs(value) < 1e4 else f"{value:.4g}"


# --------------------------------------------------------------------------- events, end


def event_record(
    message: str, level: str = "info", kind: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An `event` record: `level` info/warning/error, a `kind` tools can filter on."""
    return {"type": "event", "level": level, "message": message, "kind": kind, **extra}


def end_record(status: str, reason: str, step: int, **totals: Any) -> dict[str, Any]:
    """The `end` record: completed/stopped/failed, why, the last step, and totals."""
    return {"type": "end", "status": status, "reason": reason, "step": step, **totals}


# --------------------------------------------------------------------------- verdicts

WARN_DATA_WAIT = 0.10
INPUT_BOUND_DATA_WAIT = 0.20
SCALE_FLOOR = 1.0  # an fp16 scale below this means gradients overflow again and again
STRAGGLER_FACTOR = 1.2  # the slowest rank's step time above this x the median: a straggler


def data_wait_verdict(
    frac: float | None, data: Mapping[str, Any] | None = None, device: str | None = None
) -> tuple[str, str]:
    """(verdict, hint) for a data-wait share: ok, warning above 10%, input-bound above 20%;
    the hint fits the run's loader (`data`: the run's data config) where it is known."""
    if frac is None or not math.isfinite(frac):
        return "unknown", ""
    if frac > INPUT_BOUND_DATA_WAIT:
        verdict = "input-bound"
        generic = (
            "the loop waits for data: use data.loader='device' when the set fits on the "
            "device, else raise data.num_workers and keep data.pin_memory=true"
        )
    elif frac > WARN_DATA_WAIT:
        verdict = "warning"
        generic = "data loading is visible: raise data.num_workers or use data.loader='device'"
    else:
        return "ok", ""
    return verdict, loader_hint(data or {}, device) or generic


def loader_hint(data: Mapping[str, Any], device: str | None) -> str:
    """The fix for a data wait that fits this loader: workers, pinned memory or the device."""
    if not data:
        return ""
    if data.get("loader") == "device":
        return (
            "the data already lives on the device; the wait is batch indexing: "
            "raise data.batch_size or check for another process using the device"
        )
    tips = []
    workers = data.get("num_workers")
    tips.append(f"raise data.num_workers (now {workers})" if workers is not None else "")
    if str(device or "").startswith("cuda") and not data.get("pin_memory", True):
        tips.append("set data.pin_memory=true")
    tips.append("use data.loader='device' if the set fits in device memory")
    return "; ".join(t for t in tips if t)


def straggler(step_times: Sequence[float], factor: float = STRAGGLER_FACTOR) -> int | None:
    """The slowest rank when its step time is above `factor` x the median, else None."""
    times = [t for t in step_times if t == t]  # NaN: a rank without a measurement
    if len(times) < 2 or len(times) != len(step_times):
        return None
    median = statistics.median(times)
    slowest = max(range(len(times)), key=times.__getitem__)
    return slowest if times[slowest] > factor * median else None


# --------------------------------------------------------------------------- records read back

TEXT_FIELDS = frozenset(
    {"type", "level", "message", "kind", "hint", "status", "reason", "preset", "device",
     "device_name", "precision", "torch", "tuitrain", "python", "time", "data", "run_dir",
     "traceback", "weights_digest", "peak_source"}
)  # fmt: skip
NUMBER_FIELDS = frozenset(
    {*TRAIN_FIELDS[1:], "val_acc", "val_loss", "elapsed_s", "world_size", "train_samples",
     "val_samples", "params", "global_batch", "steps_per_epoch", "total_steps",
     "device_memory_bytes", "flops_per_sample", "peak_tflops"}
)  # fmt: skip
PER_RANK_FIELDS = frozenset({"rank_step_time_s", "rank_busy_s"})


def _is_number(value: object) -> bool:
    """A number a float and an int64 step can hold (JSON allows 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def clean_record(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A record read back from a file, with each field of the wrong type left out: a
    hand-edited or foreign metrics.jsonl must not break a viewer. Text fields hold text,
    number fields a number (or null), per-rank fields a list of numbers, `config` tables.
    None when it has no text `type` (no record of the contract)."""
    if not isinstance(raw.get("type"), str):
        return None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            out[key] = None
        elif key in TEXT_FIELDS:
            if isinstance(value, str):
                out[key] = value
        elif key in NUMBER_FIELDS:
            if _is_number(value):
                out[key] = value
        elif key in PER_RANK_FIELDS:
            if isinstance(value, list) and all(_is_number(v) for v in value):
                out[key] = value
        elif key == "config":
            if isinstance(value, dict):
                out[key] = {k: v for k, v in value.items() if isinstance(v, dict)}
        else:
            out[key] = value
    return out
