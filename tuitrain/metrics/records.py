"""The metric contract in code: record builders, the train record's fields, and the verdicts
that the engine and the UI share. No torch, no Textual: the UI, `watch` and the engine all
import it.

Every record is one JSON object, `"type"` first: `header`, `train`, `eval`, `event`, `end`;
each carries its wall-clock `time` (`wall_time`: the header's in its place, every other
record's second, after `"type"`; `record_time` reads it, None for an older run's).
A field that does not apply is None (null), never a fake number. docs/metrics.md ("The metric
contract") says what each field means.

This module owns every record type: each one is built here (`header_record`,
`train_record`, `script_train_record`, `eval_record`, `event_record`, `alert_event`,
`end_record`) and every later change to a built record goes through a function of it
(`add_telemetry`, `merge_ranks`, `tagged`, `amended_end`). A builder given a field outside
the lists declared here raises ValueError: a programming error, which the tests catch. No
other module writes a `"type"` (tests/metrics/test_contract_writers.py checks the source).
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tuitrain.metrics.numbers import format_value

Record = Mapping[str, Any]


def wall_time() -> str:
    """The wall-clock `time` every record carries, as the header's: ISO 8601 in UTC, to the
    second ("2026-12-04T18:52:43+00:00"). A reader of an older run finds no `time` outside
    its header and does without (`record_time` gives None)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def record_time(record: Mapping[str, Any]) -> datetime | None:
    """A record's `time` as an aware datetime, None when it has none (an older run's) or it
    does not parse."""
    value = record.get("time")
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _refuse(kind: str, unknown: set[Any]) -> None:
    """A builder was given fields the contract does not declare: the writer's bug."""
    if unknown:
        raise ValueError(f"{kind} record fields outside the contract: {sorted(map(str, unknown))}")


# --------------------------------------------------------------------------- headers

# Every field a header may hold, in the order its writers write them: the engine's header
# has all but the client's three (ENGINE_HEADER_FIELDS, in this order), the logging client's
# a few of the engine's and its three (`hostname`, `argv`, `client`: where it ran and how it
# was started), in this order too.
CLIENT_HEADER_FIELDS = ("hostname", "argv", "client")
HEADER_FIELDS = (
    "type",
    "preset",
    "config",
    "device",
    "device_name",
    "precision",
    "tf32",
    "compile",
    "host_malloc",
    "world_size",
    "torch",
    "tuitrain",
    "python",
    "time",
    "data",
    "train_samples",
    "val_samples",
    "params",
    "global_batch",
    "steps_per_epoch",
    "total_steps",
    "run_dir",
    *CLIENT_HEADER_FIELDS,
    "device_memory_bytes",
    "flops_per_sample",
    "peak_tflops",
    "peak_source",
    "task",
    "history",
)
ENGINE_HEADER_FIELDS = tuple(f for f in HEADER_FIELDS if f not in CLIENT_HEADER_FIELDS)


def header_record(**fields: Any) -> dict[str, Any]:
    """The `header` record: `"type"` first, then `fields` in the writer's order (the engine
    writes every ENGINE_HEADER_FIELDS field, the client some of HEADER_FIELDS, each in that
    order; `tuitrain run`'s header for a script that wrote none has a few, in its own)."""
    _refuse("header", set(fields) - set(HEADER_FIELDS[1:]))
    return {"type": "header", **fields}


# A run is every segment it resumed: `tuitrain --resume` appends a header (and its records)
# to the run's file, and that header's `history` says what the segments before it were, so
# that a reader of the last header and the tail knows the whole run. Null in a header that
# starts a run. Each field, in this order:
HISTORY_FIELDS = (
    "segments",  # how many segments came before this one (1 after the first resume)
    "elapsed_s",  # their durations summed (each its end's elapsed_s, else first to last record)
    "started",  # when the first of them started: its header's `time`
    "step",  # the last step the segment before this one reached
    "best",  # {val_<name>: its best over them, by the metric's goal}
)


def header_history(
    segments: int, elapsed_s: float, started: str | None, step: int | None,
    best: Mapping[str, float],
) -> dict[str, Any]:  # fmt: skip
    """A header's `history`: what a resumed run's earlier segments were (HISTORY_FIELDS)."""
    _refuse("history", {n for n in best if not (isinstance(n, str) and n.startswith(EVAL_PREFIX))})
    return {
        "segments": segments,
        "elapsed_s": round(elapsed_s, 3),
        "started": started,
        "step": step,
        "best": dict(best),
    }


def history_of(header: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A header's `history` read defensively (HISTORY_FIELDS, each of its type or left as
    the field's empty value), None where the header has none: the run started there."""
    raw = (header or {}).get("history")
    if not isinstance(raw, Mapping):
        return None
    segments, elapsed, started, step = (raw.get(k) for k in HISTORY_FIELDS[:4])
    best = raw.get("best")
    seconds = float(elapsed) if isinstance(elapsed, (int, float)) and _is_number(elapsed) else -1.0
    counted = isinstance(segments, int) and valid_step(segments) and segments > 0
    return {
        "segments": segments if counted else 1,
        "elapsed_s": seconds if 0 <= seconds < math.inf else 0.0,
        "started": started if isinstance(started, str) else None,
        "step": step if valid_step(step) else None,
        "best": {
            str(k)[:64]: float(v)
            for k, v in (best.items() if isinstance(best, Mapping) else ())
            if str(k).startswith(EVAL_PREFIX) and _is_number(v) and math.isfinite(v)
        },
    }


# --------------------------------------------------------------------------- train records

# What one train record holds, in order (under DDP or FSDP the COMM_FIELDS, then the per-rank
# lists of RANK_LISTS follow; one process has `rank_step_time_s` only).
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
    "time",
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
# Time in collectives per optimizer step (DDP, FSDP; engine/comm.py): seconds in them (the union
# of their spans), of those the part the step waited for (after the backward's compute ended;
# null under FSDP, where it is not measured), and both as shares of the step time.
COMM_FIELDS = ("comm_s", "comm_exposed_s", "comm_frac", "comm_exposed_frac")
# How DDP and FSDP merge each rank's figure into rank 0's record (one all-gather per log
# point): `busy_s` (this rank's data wait + forward per step) becomes the per-rank list
# `rank_busy_s`, `step_time_s` also the per-rank list `rank_step_time_s`. The time in
# collectives is the rank that spent most there (in lockstep, the rank waiting longest for
# the others: the fastest one, so the max shows the wait a straggler causes).

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
    "comm_s": "max",
    "comm_exposed_s": "max",
    "comm_frac": "max",
    "comm_exposed_frac": "max",
}
# Merged fields whose per-rank values the record keeps too (as these lists), when every
# rank has one: the comm shares, each rank's device allocator peak (CUDA) and host RSS.
RANK_LISTS = {
    "comm_frac": "rank_comm_frac",
    "comm_exposed_frac": "rank_comm_exposed_frac",
    "mem_peak_bytes": "rank_mem_peak_bytes",
    "host_rss_bytes": "rank_host_rss_bytes",
}
# Each rank's node (torchrun's GROUP_RANK), gathered beside the record's fields and kept as
# `rank_node` only when the job spans more than one node.
NODE_COLUMN = "rank_node"


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
    tokens_per_s: float | None = None,
    metrics: Mapping[str, float | None] | None = None,
    busy_s: float | None = None,
    comm: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """A train record with every field of TRAIN_FIELDS, in that order (`monitor`: the
    MONITOR_FIELDS, each null when absent); then `tokens_per_s` (a task that counts tokens),
    the task's own train `metrics` (names from `user_field`, never a contract field) and
    `busy_s` (DDP: this rank's own work per step, which `merge_ranks` turns into
    `rank_busy_s`), and `comm` (the COMM_FIELDS, each null when absent), each only when
    given."""
    monitor = monitor or {}
    metrics = metrics or {}
    unknown = (set(telemetry) - set(TELEMETRY_FIELDS)) | (set(monitor) - set(MONITOR_FIELDS))
    unknown |= set(comm or {}) - set(COMM_FIELDS)
    if unknown:
        raise ValueError(f"telemetry or monitor fields outside the contract: {sorted(unknown)}")
    _refuse("train", {n for n in metrics if not isinstance(n, str) or n in CONTRACT_FIELDS})
    record = {
        "type": "train",
        "time": wall_time(),
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
    if tokens_per_s is not None:
        record["tokens_per_s"] = tokens_per_s
    record.update(metrics)
    if comm is not None:
        record.update((name, comm.get(name)) for name in COMM_FIELDS)
    if busy_s is not None:
        record["busy_s"] = busy_s
    return record


# Fields a train record may hold beside TRAIN_FIELDS: the time in collectives and the per-rank
# lists (DDP, FSDP) and `tokens_per_s` (a task that counts tokens). Any other field of a train
# record is one of the task's own train metrics, which the header's `task.metrics` declares.
TRAIN_EXTRA_FIELDS = (
    *COMM_FIELDS,
    "rank_step_time_s",
    "rank_busy_s",
    *RANK_LISTS.values(),
    NODE_COLUMN,
    "tokens_per_s",
    "dropped_fields",
)


# Every field name the contract itself writes in a train or eval record. A user's key or a
# task metric of one of these names never becomes that field: it is kept under
# `user_field(name)` (`user/<name>`), so `{"type": 3}` or nanoGPT's `mfu` (in percent) can
# neither hide a record nor replace the engine's measurement.
CONTRACT_FIELDS = frozenset({*TRAIN_FIELDS, *TRAIN_EXTRA_FIELDS, "busy_s", "time", "rank"})
USER_PREFIX = "user/"


def user_field(name: str) -> str:
    """The record field a user's metric `name` is written under: itself, or `user/<name>`
    when the contract has a field of that name."""
    return USER_PREFIX + name if name in CONTRACT_FIELDS else name


# The contract fields a script's train record can hold (the logging client's): what the
# script logged under a known name, the step time the client measures between rows, and the
# telemetry it samples at a flush. Every other field is the script's own, via `user_field`.
SCRIPT_TRAIN_FIELDS = ("epoch", "loss", "lr", "grad_norm")


def script_train_record(
    step: int, values: Mapping[str, float | None], step_time_s: float | None = None
) -> dict[str, Any]:
    """A script's train record: type, time, step, then `epoch` and `loss` when logged, the
    measured `step_time_s` when known, then the rest of `values` (`lr`, `grad_norm` and
    the script's own metrics, already named by `user_field`) in the order they were logged."""
    _refuse(
        "script train",
        {
            k
            for k in values
            if not isinstance(k, str) or (k in CONTRACT_FIELDS and k not in SCRIPT_TRAIN_FIELDS)
        },
    )
    record: dict[str, Any] = {"type": "train", "time": wall_time(), "step": step}
    for name in ("epoch", "loss"):
        if name in values:
            record[name] = values[name]
    if step_time_s is not None:
        record["step_time_s"] = step_time_s
    record.update((k, v) for k, v in values.items() if k not in ("epoch", "loss"))
    return record


def add_telemetry(record: dict[str, Any], telemetry: Mapping[str, Any]) -> None:
    """What the client samples at a flush (host RSS, allocator, NVML: TELEMETRY_FIELDS),
    added to its newest train record."""
    _refuse("telemetry", set(telemetry) - set(TELEMETRY_FIELDS))
    record.update(telemetry)


def add_rank_lists(record: dict[str, Any], lists: Mapping[str, Sequence[float]]) -> None:
    """A script's per-rank lists (`rank_step_time_s`, `rank_host_rss_bytes` ...: the other
    ranks' figures the client reads at a flush, NaN for a rank that has not reported), added
    to rank 0's newest train record."""
    _refuse("per-rank", set(lists) - PER_RANK_FIELDS)
    record.update((name, list(values)) for name, values in lists.items())


def rank_merge_fields(
    record: Mapping[str, Any], metric_names: Sequence[str] = ()
) -> dict[str, str]:
    """What DDP gathers from every rank, in the order of the gathered vector, and how each
    becomes rank 0's figure: RANK_MERGE, the task's own train metrics (mean over ranks) and
    tokens/s (a sum); the COMM_FIELDS where the record has them (every rank's strategy is
    the same, so every rank gathers the same fields)."""
    merge = {k: how for k, how in RANK_MERGE.items() if k not in COMM_FIELDS or k in record}
    for key in metric_names:
        merge[key] = "mean"
    if "tokens_per_s" in record:
        merge["tokens_per_s"] = "sum"
    return merge


def merge_ranks(
    record: dict[str, Any],
    columns: Mapping[str, Sequence[float]],
    reduce: Callable[[str, str], float] | None = None,
) -> None:
    """Rank 0's train record made the run's: each field of `columns` (one value per rank,
    NaN for a rank without it; from `rank_merge_fields`) merged as RANK_MERGE says (a field
    this rank has as null stays null), the loss null when any rank's is not finite,
    `rank_step_time_s` (and `rank_busy_s`, replacing `busy_s`, when gathered), the lists of
    RANK_LISTS (where every rank has the figure) and `rank_node` (gathered, and more than one
    node) appended, and `step_time_s` the slowest rank's. `reduce(field, how)` gives a merged
    value (the engine reduces its gathered tensor); without it, Python's sum/mean/max of the
    column."""

    def python_reduce(key: str, how: str) -> float:
        column = [float(v) for v in columns[key]]
        if how == "sum":
            return math.fsum(column)
        if how == "mean":
            return math.fsum(column) / len(column)
        return max(column)

    _refuse("rank-merged train", set(columns) - set(record) - {"busy_s", NODE_COLUMN})
    reduce = reduce or python_reduce
    how_of = {k: RANK_MERGE.get(k, "mean") for k in columns}
    if "tokens_per_s" in columns:
        how_of["tokens_per_s"] = "sum"
    for key, how in how_of.items():
        if key in ("step_time_s", "busy_s", NODE_COLUMN) or record.get(key) is None:
            continue
        if how in ("sum", "mean"):
            record[key] = float(reduce(key, how))
        elif how == "max":
            value = reduce(key, how)
            whole = key.endswith("_bytes") or key == "host_syncs"
            record[key] = int(value) if whole else float(value)
    finite = all(math.isfinite(float(v)) for v in columns.get("loss", ()))
    if record.get("loss") is not None and not finite:
        record["loss"] = None  # any rank's NaN is everyone's NaN
    record["rank_step_time_s"] = [float(v) for v in columns["step_time_s"]]
    if "busy_s" in columns:
        record["rank_busy_s"] = [float(v) for v in columns["busy_s"]]  # data wait + forward
        record.pop("busy_s", None)
    for key, name in RANK_LISTS.items():
        values = [float(v) for v in columns.get(key, ())]
        if record.get(key) is not None and values and all(map(math.isfinite, values)):
            record[name] = [int(v) for v in values] if key.endswith("_bytes") else values
    nodes = [int(v) for v in columns.get(NODE_COLUMN, ())]
    if len(set(nodes)) > 1:
        record[NODE_COLUMN] = nodes
    record["step_time_s"] = float(reduce("step_time_s", "max"))


# --------------------------------------------------------------------------- eval records

# An eval record: these, then one `val_<name>` field per validation metric of the task (or
# of the script), in the order measured. A script's eval record has no epoch.
EVAL_FIELDS = ("type", "time", "step", "epoch")
EVAL_PREFIX = "val_"


def eval_record(
    step: int, metrics: Mapping[str, float | None], epoch: float | None = None
) -> dict[str, Any]:
    """An `eval` record: type, time, step, epoch (rounded as a train record's; left out when
    None), then `val_<name>` for each of `metrics` (a non-finite value is null)."""
    _refuse("eval", {n for n in metrics if not isinstance(n, str) or not n})
    record: dict[str, Any] = {"type": "eval", "time": wall_time(), "step": step}
    if epoch is not None:
        record["epoch"] = round(epoch, 4)
    for name, value in metrics.items():
        finite = value is not None and math.isfinite(value)
        record[EVAL_PREFIX + name] = value if finite else None
    return record


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
# a classifier's accuracy (its eval records' field): the one name readers that need it import
CLASSIFY_PRIMARY: str = CLASSIFY_DECLARATION["primary"]


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


# Words of a metric's name (split at "_") that say lower is better, for a metric the header
# does not declare (a script's `val/loss`, `val/error_rate`...); a word starting with "err" too.
LOWER_IS_BETTER = frozenset(
    {"loss", "nll", "perplexity", "ppl", "mse", "mae", "rmse", "wer", "cer", "bpc", "bpb"}
)


def metric_goal(name: str, task: Mapping[str, Any]) -> str:
    """An evaluation metric's goal, "max" or "min": as `task` (a task_declaration) declares
    it (the primary's by the task's mode), else by its name (LOWER_IS_BETTER)."""
    if name == task["primary"]:
        return "max" if task["mode"] == "max" else "min"
    spec = next((m for m in task["metrics"] if m["name"] == name), None)
    if spec is not None and spec["goal"] in ("min", "max"):
        return str(spec["goal"])
    words = name.removeprefix(EVAL_PREFIX).lower().split("_")
    return "min" if any(w in LOWER_IS_BETTER or w.startswith("err") for w in words) else "max"


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
    """A metric as the dashboard and the log lines show it: pct as 85.31%, else four
    significant digits at every magnitude (metrics.numbers.format_value); None as "–"."""
    if value is None:
        return "–"
    return format_value(value, fmt)


# --------------------------------------------------------------------------- events, end


# An event record: these, then the fields of its kind (a checkpoint's path, an alert's
# figures ...), which may not take these names.
EVENT_FIELDS = ("type", "time", "level", "message", "kind")
# An alert event (`kind` "alert"): these after EVENT_FIELDS, then the alert's figures.
ALERT_FIELDS = ("alert", "action", "step")


def event_record(
    message: str, level: str = "info", kind: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An `event` record: `level` info/warning/error, a `kind` tools can filter on."""
    _refuse("event", set(extra) & set(EVENT_FIELDS))
    return {
        "type": "event",
        "time": wall_time(),
        "level": level,
        "message": message,
        "kind": kind,
        **extra,
    }


def alert_event(
    name: str, action: str, message: str, step: int | None, *, outcome: str = "", **figures: Any
) -> dict[str, Any]:
    """The event of an alert rule (the engine's and a script's alike, and what the on_alert
    command reads): "alert NAME: MESSAGE (OUTCOME)", its action, the step, its figures."""
    _refuse("alert event", set(figures) & {*EVENT_FIELDS, *ALERT_FIELDS})
    return event_record(
        f"alert {name}: {message}" + (f" ({outcome})" if outcome else ""),
        level="warning",
        kind="alert",
        alert=name,
        action=action,
        step=step,
        **figures,
    )


# A script's names: the logging client writes the contract's field under the name every reader
# charts (`train_loss` -> `loss`, `eval_top1` -> `val_top1`, `validation/loss` -> `val_loss`,
# a user's `step` -> `user/step`) and records once, in an event of this kind, the name the
# script logged each field under (`names`: {field: the script's key}); readers show and find
# a field by both (`aliases`). An alias, not a rename.
NAMES_KIND = "names"
MAX_ALIASES = 256  # fields with an alias a reader keeps (a script's metrics: MAX_SERIES)


def names_event(names: Mapping[str, str]) -> dict[str, Any]:
    """The event of kind `names`: "names: train_loss as loss, ..." and `names` {field: the
    script's key}, for the fields first written in this flush under another name."""
    said = ", ".join(f"{key} as {field}" for field, key in names.items())
    return event_record(f"names: {said}", kind="names", names=dict(names))  # NAMES_KIND


def aliases(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """{field: the name the script logged it under} from a run's `names` events, read
    defensively (text to text only; the first alias of a field kept; at most MAX_ALIASES)."""
    out: dict[str, str] = {}
    for record in records:
        add_aliases(out, record)
    return out


def add_aliases(out: dict[str, str], record: Mapping[str, Any]) -> bool:
    """`record`'s aliases into `out` when it is a `names` event; whether it is one."""
    if record.get("type") != "event" or record.get("kind") != NAMES_KIND:
        return False
    names = record.get("names")
    if isinstance(names, Mapping):
        for field, key in names.items():
            ok = isinstance(field, str) and isinstance(key, str) and 0 < len(key) <= 256
            if ok and field != key and len(out) < MAX_ALIASES:
                out.setdefault(field, key)
    return True


def script_alert_event(message: str, level: str = "warning") -> dict[str, Any]:
    """A script's own `run.alert(...)` (wandb's): an alert event named "script"."""
    return event_record(message, level=level, kind="alert", alert="script")


# The end record: these, then its totals (those of END_TOTALS that the writer knows, and
# the last evaluation's `val_<name>` metrics).
END_FIELDS = ("type", "time", "status", "reason", "step")
END_TOTALS = (
    "samples",
    "elapsed_s",
    "mean_samples_per_s",
    "val_acc",
    "val_loss",
    "weights_digest",
    "exit_code",
    "dropped_rows",
    "dropped_values",
    "summary",
    "ui_failed",
)


def _refuse_totals(totals: Mapping[str, Any]) -> None:
    _refuse("end", {k for k in totals if k not in END_TOTALS and not k.startswith(EVAL_PREFIX)})


def end_record(
    status: str,
    reason: str,
    step: int,
    *,
    carried: Mapping[str, Any] | None = None,
    **totals: Any,
) -> dict[str, Any]:
    """The `end` record: completed/stopped/failed, why, the last step, and totals.
    `carried`: the fields of an end record read back (another writer's: not checked) that
    this one repeats, in their order; `totals` (checked) replace or follow them."""
    _refuse_totals(totals)
    record: dict[str, Any] = {
        "type": "end",
        "time": wall_time(),
        "status": status,
        "reason": reason,
        "step": step,
    }
    record.update((k, v) for k, v in (carried or {}).items() if k not in END_FIELDS)
    record.update(totals)
    return record


def amended_end(record: Mapping[str, Any], reason: str, **totals: Any) -> dict[str, Any]:
    """A copy of an end record with another reason and more totals (the host's: the
    dashboard failed during the run)."""
    _refuse_totals(totals)
    return {**record, "reason": reason, **totals}


# Fields `tuitrain parity` adds to each record of its two runs (and of the early check).
RUN_TAG_FIELDS = ("run", "early")


def tagged(record: Mapping[str, Any], run: str, early: bool = False) -> dict[str, Any]:
    """A copy of `record` tagged with the parity run it belongs to (`early`: the early
    check's)."""
    return {**record, "run": run, **({"early": True} if early else {})}


# --------------------------------------------------------------------------- verdicts

WARN_DATA_WAIT = 0.10
INPUT_BOUND_DATA_WAIT = 0.20
SCALE_FLOOR = 1.0  # an fp16 scale below this means gradients overflow again and again
STRAGGLER_FACTOR = 1.2  # the slowest rank's step time above this x the median: a straggler
# ... and at least this many seconds a step above it: less costs the job little, and a loaded
# host's timer noise on a small model's work (a script's ranks at ~1 ms each) is that size
STRAGGLER_FLOOR_S = 0.001


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
    """The slowest rank when its step time is above `factor` x the median and at least
    STRAGGLER_FLOOR_S above it, else None."""
    times = [t for t in step_times if t == t]  # NaN: a rank without a measurement
    if len(times) < 2 or len(times) != len(step_times):
        return None
    median = statistics.median(times)
    slowest = max(range(len(times)), key=times.__getitem__)
    slow = times[slowest] > factor * median and times[slowest] - median >= STRAGGLER_FLOOR_S
    return slowest if slow else None


# --------------------------------------------------------------------------- records read back

TEXT_FIELDS = frozenset(
    {"type", "level", "message", "kind", "hint", "status", "reason", "preset", "device",
     "device_name", "precision", "torch", "tuitrain", "python", "time", "data", "run_dir",
     "traceback", "weights_digest", "peak_source"}
)  # fmt: skip
NUMBER_FIELDS = frozenset(
    {*(f for f in TRAIN_FIELDS if f not in ("type", "time")), "val_acc", "val_loss",
     "elapsed_s", "world_size", "train_samples", "val_samples", "params", "global_batch",
     "steps_per_epoch", "total_steps",
     "device_memory_bytes", "flops_per_sample", "peak_tflops", *COMM_FIELDS}
)  # fmt: skip
PER_RANK_FIELDS = frozenset({"rank_step_time_s", "rank_busy_s", *RANK_LISTS.values(), NODE_COLUMN})


def _is_number(value: object) -> bool:
    """A number a float and an int64 step can hold (JSON allows 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def clean_record(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """A record read back from a file, with each field of the wrong type left out: a
    hand-edited or foreign metrics file must not break a viewer. Text fields hold text,
    number fields a number (or null), per-rank fields a list of numbers (or nulls), `config`
    tables.
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
            # null: a rank without the figure (a script's rank that has not reported)
            if isinstance(value, list) and all(v is None or _is_number(v) for v in value):
                out[key] = value
        elif key == "config":
            if isinstance(value, dict) and raw["type"] == "event":
                out[key] = value  # a script's config set after init: its own flat keys
            elif isinstance(value, dict):  # a header's: one table per section
                out[key] = {k: v for k, v in value.items() if isinstance(v, dict)}
        else:
            out[key] = value
    return out
