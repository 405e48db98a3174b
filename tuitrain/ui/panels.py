"""Which panels a run gets, and what they chart: pure functions of a Snapshot, no Textual.

A hosted engine's run (its header has the engine's fields: `global_batch`, `steps_per_epoch`)
gets the training dashboard: loss, throughput, memory, the GradScaler where there is one
(fp16) or else the run's own metrics, data wait, the run overview. A script's run (written by
tuitrain's client: `client` in its header, or a header without the engine's fields) has no
scaler, no data-wait figure and no model size: it gets loss, throughput in steps/s, its own
metrics, memory, its Config and its Summary (the last value of every key), as W&B shows them.

Every series a run holds is a metric the metrics screen (`g`) charts: the task's or the
script's own first, then the contract's (lr, grad norm, throughput, step time, memory ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tuitrain.metrics.format import format_value, human_bytes
from tuitrain.metrics.records import (
    CLASSIFY_DECLARATION,
    CLASSIFY_PRIMARY,
    CONTRACT_FIELDS,
    EVAL_PREFIX,
    Record,
    task_declaration,
)
from tuitrain.metrics.store import Snapshot

ENGINE_FIELDS = ("global_batch", "steps_per_epoch")  # a hosted engine's header has them


def is_script_run(header: Mapping[str, Any] | None) -> bool:
    """A run written by tuitrain's client (a user's script): `client` in its header, or a
    header without the engine's fields. No header yet: not known, so False."""
    if not header:
        return False
    return bool(header.get("client")) or not any(header.get(f) is not None for f in ENGINE_FIELDS)


ENGINE_PANELS = ("loss", "throughput", "memory", "scaler", "datawait", "overview")
ENGINE_NO_SCALER = ("loss", "throughput", "memory", "metrics", "datawait", "overview")
SCRIPT_PANELS = ("loss", "throughput", "memory", "metrics", "config", "summary")


def panel_ids(header: Mapping[str, Any] | None, script: bool = False) -> tuple[str, ...]:
    """The six panels a run shows, in grid order. `script`: the app hosts a script (its
    header may not have come yet)."""
    if script or is_script_run(header):
        return SCRIPT_PANELS
    if header is not None and header.get("precision") not in (None, "fp16"):
        return ENGINE_NO_SCALER  # bf16, fp32: no GradScaler; the run's metrics instead
    return ENGINE_PANELS


# ------------------------------------------------------------------------------ throughput
def throughput_unit(snap: Snapshot) -> str:
    """What the run's throughput is counted in: tokens (a task that counts them, such as a
    language model), samples (the engine's runs), or steps (a script: its batch is unknown)."""
    latest = snap.latest or {}
    task = (snap.header or {}).get("task")
    counts_tokens = isinstance(task, Mapping) and task.get("tokens") is True
    if counts_tokens or len(snap.get("tokens_per_s")) or latest.get("tokens_per_s") is not None:
        return "tokens"
    if len(snap.get("samples_per_s")) or latest.get("samples_per_s") is not None:
        return "samples"
    if is_script_run(snap.header):
        return "steps"
    return "samples"


def steps_per_s(step_time_s: float | None) -> float | None:
    """Optimizer steps a second from the time a step takes (None where unknown)."""
    if step_time_s is None or not math.isfinite(step_time_s) or step_time_s <= 0:
        return None
    return 1.0 / step_time_s


# ------------------------------------------------------------------------------ metrics
SKIPPED = frozenset({"epoch", "samples"})  # x-like counters: no chart of their own
FIRST = ("loss", "val_loss")
CONTRACT_ORDER = (
    "lr", "grad_norm", "tokens_per_s", "samples_per_s", "step_time_s", "data_wait_frac",
    "grad_scale", "skipped_steps", "tflops", "mfu", "mem_alloc_bytes", "mem_reserved_bytes",
    "mem_peak_bytes", "gpu_mem_used_bytes", "host_rss_bytes", "gpu_util_pct",
)  # fmt: skip
PCT_FIELDS = frozenset({"data_wait_frac", "mfu"})
PANEL_CONTRACT = ("lr", "grad_norm")  # the contract's series the Metrics panel lists too


def metric_spec(
    name: str, declared: Mapping[str, Mapping[str, Any]], alias: str = ""
) -> dict[str, Any]:
    """{name, goal, format, unit, alias} of one series: as the header declares it, else by
    name; `alias` the name a script logged it under, where that differs (records.aliases)."""
    spec = declared.get(name)
    if spec is not None:
        return {**{k: spec.get(k) for k in ("name", "goal", "format", "unit")}, "alias": alias}
    twin = declared.get(twin_name(name))
    if twin is not None:  # one format a metric: `acc` as its declared eval twin (98.44%)
        return {"name": name, "goal": twin.get("goal"), "format": twin.get("format"),
                "unit": twin.get("unit"), "alias": alias}  # fmt: skip
    fmt = "pct" if name in PCT_FIELDS else ("bytes" if name.endswith("_bytes") else "float")
    goal = "min" if name in ("loss", "val_loss") else None
    return {"name": name, "goal": goal, "format": fmt, "unit": "", "alias": alias}


def twin_name(name: str) -> str:
    """The same metric on the other split: `val_<name>` for `<name>`, `train/<name>` or
    `train_<name>`; `<name>` for `val_<name>`; a script's `val/<name>` (as the client writes
    it) `val_<name>`."""
    if name.startswith(EVAL_PREFIX):
        return name.removeprefix(EVAL_PREFIX)
    for prefix in ("val/", "eval/", "validation/", "eval_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            return EVAL_PREFIX + name[len(prefix) :].replace("/", "_")
    return EVAL_PREFIX + name.removeprefix("train/").removeprefix("train_")


def metric_label(spec: Mapping[str, Any]) -> str:
    """A series' name as a reader shows it: `val_top1 (eval_top1)` where the script logged it
    under another name, else the name alone."""
    alias = spec.get("alias")
    return f"{spec['name']} ({alias})" if alias else str(spec["name"])


def declared_metrics(header: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The header's metric declarations by name: an old header (no `task`) is a
    classifier's; otherwise what it declares, and the contract's accuracy (CLASSIFY_PRIMARY)
    a share wherever it is not declared (a script's `val/acc`). A script's loss has no unit
    it did not say."""
    classify = {m["name"]: m for m in CLASSIFY_DECLARATION["metrics"]}
    if not isinstance((header or {}).get("task"), Mapping):
        return classify
    share = {CLASSIFY_PRIMARY: classify[CLASSIFY_PRIMARY]}
    return share | {m["name"]: m for m in task_declaration(header)["metrics"]}


def own_metric_names(snap: Snapshot) -> list[str]:
    """The run's own metrics: what its task declares, then every other series outside the
    contract (a script's keys), train before validation, in the order first seen."""
    names: list[str] = []
    declared = task_declaration(snap.header)["metrics"] if snap.header else []
    for spec in declared:
        if spec["name"] in snap.series and spec["name"] not in FIRST + tuple(names):
            names.append(spec["name"])
    for name in snap.series:
        if name not in CONTRACT_FIELDS and name not in FIRST and name not in names:
            names.append(name)
    return sorted(names, key=lambda n: n.startswith("val_"))  # stable: order kept otherwise


def all_metric_specs(snap: Snapshot) -> list[dict[str, Any]]:
    """Every series the run holds, one spec each: the loss and val loss, the run's own
    metrics, then the contract's measurements (lr, grad norm, throughput, step time, data
    wait, scaler, FLOP rate, memory) and anything else it wrote."""
    declared = declared_metrics(snap.header)
    names = [n for n in FIRST if n in snap.series] + own_metric_names(snap)
    names += [n for n in CONTRACT_ORDER if n in snap.series and n not in names]
    names += [n for n in snap.series if n not in names and n not in SKIPPED]
    return [metric_spec(n, declared, snap.aliases.get(n, "")) for n in names]


def panel_metric_specs(snap: Snapshot) -> list[dict[str, Any]]:
    """What the main view's Metrics panel lists: the run's own metrics, then lr and the
    grad norm."""
    declared = declared_metrics(snap.header)
    names = own_metric_names(snap) + [n for n in PANEL_CONTRACT if n in snap.series]
    return [metric_spec(n, declared, snap.aliases.get(n, "")) for n in names]


def metric_text(value: float | None, spec: Mapping[str, Any]) -> str:
    """A value as its spec says: bytes in binary units, shares in %, else significant digits."""
    if spec.get("format") == "bytes" and value is not None:
        return human_bytes(value)
    return format_value(value, "pct" if spec.get("format") == "pct" else "float")


def metric_unit(spec: Mapping[str, Any]) -> str:
    """' nats/char' after a value whose declaration gives a unit, else ''."""
    unit = str(spec.get("unit") or "")
    return f" {unit}" if unit and spec.get("format") != "pct" else ""


# ------------------------------------------------------------------------------ sparklines
SPARK_BARS = "▁▂▃▄▅▆▇█"
SPARK_MIN_SPAN = 0.1  # a sparkline's range spans at least this share of its largest |value|


def spark_range(values: Sequence[float]) -> tuple[float, float] | None:
    """The y range a one-line sparkline scales to: the values' own, widened around its middle
    to at least SPARK_MIN_SPAN of their magnitude, so that a 1% wobble is a ripple, not a
    full-height cliff. None without a finite value."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    floor = SPARK_MIN_SPAN * max(abs(lo), abs(hi))
    if hi - lo < floor:
        middle = lo / 2 + hi / 2
        lo, hi = middle - floor / 2, middle + floor / 2
    if not hi > lo:  # all zeros
        lo, hi = lo - 1.0, hi + 1.0
    return lo, hi


def spark_bars(values: Sequence[float], width: int) -> str:
    """A one-line sparkline: `spark_rows` of height 1."""
    return spark_rows(values, width, 1)[0] if width > 0 else ""


def spark_rows(
    values: Sequence[float],
    width: int,
    height: int,
    floor: tuple[float, float] | None = None,
) -> list[str]:
    """`values` as `height` lines of `width` block characters, top line first (each cell the
    mean of its share of the values, or the value it falls on when there are fewer values
    than cells; blank where none is finite), scaled by `spark_range`, or at least over
    `floor` (a share's 0 to 25%: a data wait of 0.04% is no half-full bar). A single value
    is one mark at its level in the first cell, not a bar stretched over the width."""
    height = max(1, height)
    if width <= 0:
        return [""] * height
    bounds = spark_range(values)
    if bounds is not None and floor is not None:
        bounds = min(bounds[0], floor[0]), max(bounds[1], floor[1])
    if bounds is None:
        return [" " * width] * height
    lo, hi = bounds
    n, eighths = len(values), len(SPARK_BARS) * height
    levels: list[int] = []  # eighths of the height filled, 1.., 0 for no value
    for i in range(width):  # fewer values than cells: each value stretched over a few
        start = i * n // width
        finite = [
            v for v in values[start : max(start + 1, (i + 1) * n // width)] if math.isfinite(v)
        ]
        if not finite:
            levels.append(0)
            continue
        share = (sum(finite) / len(finite) - lo) / (hi - lo)
        levels.append(max(1, min(eighths, int(share * eighths) + 1)))
    if n == 1:  # one value: a mark at its level in the first cell, no wall of bars
        top = (levels[0] - 1) // len(SPARK_BARS) if levels[0] else -1
        return [
            (SPARK_BARS[(levels[0] - 1) % len(SPARK_BARS)] if height - 1 - row == top else " ")
            + " " * (width - 1)
            for row in range(height)
        ]
    rows = []
    for row in range(height):
        base = (height - 1 - row) * len(SPARK_BARS)
        cells = []
        for level in levels:
            filled = level - base
            if filled <= 0:
                cells.append(" ")
            else:
                cells.append(SPARK_BARS[min(filled, len(SPARK_BARS)) - 1])
        rows.append("".join(cells))
    return rows


# ------------------------------------------------------------------------------ script runs
def config_items(header: Mapping[str, Any] | None, limit: int = 40) -> list[tuple[str, str]]:
    """A script's config as (key, value) rows, nested keys joined by dots; wandb's init
    keywords (project, tags ...) after them."""
    config = (header or {}).get("config")
    if not isinstance(config, Mapping):
        return []
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value: object) -> None:
        if len(rows) >= limit:
            return
        if isinstance(value, Mapping) and (value or not prefix):  # {} at the top: no rows
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:  # as the script gave it: 0.05, not 0.05000
            rows.append((prefix, str(value)))

    walk("", config.get("script") if "script" in config else config)
    meta = config.get("meta")
    if isinstance(meta, Mapping):
        walk("", meta)
    return rows[:limit]


def script_config_items(
    header: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]] = (), limit: int = 40
) -> list[tuple[str, str]]:
    """The Config pane's rows: the header's config, then each `config` event's (set after
    init: `wandb.config.update`, Lightning's hyperparameters at fit, test and predict),
    merged: a key once, where it first came, with its last value."""
    merged = dict(config_items(header, limit))
    for event in events:
        config = event.get("config")
        if event.get("kind") == "config" and isinstance(config, Mapping):
            for key, value in config_items({"config": config}, limit):
                if key in merged or len(merged) < limit:
                    merged[key] = value
    return list(merged.items())


def summary_items(snap: Snapshot) -> list[tuple[str, str]]:
    """The run's summary as W&B shows it: the end record's `summary` (the last value of every
    key the script logged, and what it set itself), else the last value of each of the run's
    series so far."""
    declared = declared_metrics(snap.header)
    summary = (snap.end or {}).get("summary")
    if isinstance(summary, Mapping) and summary:
        return [
            (str(k), metric_text(v, metric_spec(str(k), declared)) if _real(v) else str(v))
            for k, v in summary.items()
        ]
    rows = []
    for spec in all_metric_specs(snap):
        rows.append((spec["name"], metric_text(snap.get(spec["name"]).last, spec)))
    return rows


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ------------------------------------------------------------------------------ evaluations
def eval_label(rec: Record) -> str:
    """Where an evaluation happened: ``epoch 2 done`` at an epoch's end, else ``eval at step
    50`` (mid-epoch, or a script's, which has no epochs)."""
    epoch = rec.get("epoch")
    step = rec.get("step")
    if isinstance(epoch, (int, float)) and math.isfinite(epoch) and float(epoch).is_integer():
        return f"epoch {int(epoch)} done"
    return f"eval at step {step}" if _real(step) else "eval"
