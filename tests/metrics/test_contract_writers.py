"""One contract module owns every record type: `tuitrain/metrics/records.py` builds each
record, and no other module writes a `"type"`. Each builder refuses a field outside the
declared lists (a writer's bug) and gives the fields in the order the readers expect."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tuitrain.metrics.records import (
    CLIENT_HEADER_FIELDS,
    CONTRACT_FIELDS,
    END_FIELDS,
    END_TOTALS,
    ENGINE_HEADER_FIELDS,
    EVAL_FIELDS,
    EVENT_FIELDS,
    HEADER_FIELDS,
    MONITOR_FIELDS,
    TELEMETRY_FIELDS,
    TRAIN_FIELDS,
    add_telemetry,
    alert_event,
    amended_end,
    end_record,
    eval_record,
    event_record,
    header_record,
    merge_ranks,
    rank_merge_fields,
    script_alert_event,
    script_train_record,
    tagged,
    train_record,
    user_field,
)
from tuitrain.metrics.sinks import NullSink

PACKAGE = Path(__file__).resolve().parents[2] / "tuitrain"
CONTRACT = PACKAGE / "metrics" / "records.py"

# Text that names `"type"` outside the contract module and writes no record: follow.py's
# byte prefixes (it scans a file for the engine's train and event lines without parsing
# them), and the sink's serializer, which copies a built record's type to the front of its
# JSON line.
ALLOWED = {
    ("rundir/follow.py", 'TRAIN_PREFIX = b\'{"type": "train"\''),
    ("rundir/follow.py", 'EVENT_PREFIX = b\'{"type": "event"\''),
    ("rundir/follow.py", 'HEADER_PREFIX = b\'{"type": "header"\''),
    ("rundir/follow.py", 'NON_TRAIN_LINE = re.compile(rb\'\\n(?!\\{"type": "train")([^\\n]*)\')'),
    ("rundir/follow.py", 'Only the train lines the engine writes (`{"type": "train"` first)'),
    ("metrics/sinks.py", 'ordered["type"] = _clean(record["type"])'),
}
TYPE_TEXT = re.compile(r"""["']type["']\s*:\s*\S|\[\s*["']type["']\s*\]\s*=(?!=)""")


def sources() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p != CONTRACT]


def test_no_module_but_the_contract_writes_a_type_literal() -> None:
    """`"type": ...` in a dict or `x["type"] = ...`: only records.py, and the allow-list."""
    found = []
    for path in sources():
        rel = path.relative_to(PACKAGE).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if TYPE_TEXT.search(line) and not any(
                rel == where and text in line for where, text in ALLOWED
            ):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "records built outside tuitrain/metrics/records.py:\n" + "\n".join(found)


def test_no_module_but_the_contract_builds_a_typed_dict() -> None:
    """The same through the syntax tree: no `{"type": ...}`, no `dict(type=...)`, no
    assignment to a `["type"]` subscript, however the source is laid out."""
    found = []
    for path in sources():
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "type" for k in node.keys
            ):
                found.append(f"{rel}:{node.lineno}: a dict with a 'type' key")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "dict"
                and any(k.arg == "type" for k in node.keywords)
            ):
                found.append(f"{rel}:{node.lineno}: dict(type=...)")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Subscript) and (
                        isinstance(target.slice, ast.Constant) and target.slice.value == "type"
                    ):
                        found.append(f"{rel}:{node.lineno}: ['type'] = ...")
    allowed = {"metrics/sinks.py"}  # the serializer's ordered["type"] (see ALLOWED)
    found = [f for f in found if f.split(":")[0] not in allowed or "['type'] =" not in f]
    assert not found, "\n".join(found)


def test_the_allow_list_is_still_needed() -> None:
    """Every allowed line is still in its file: an allow-list does not outlive its reason."""
    for where, text in ALLOWED:
        assert text in (PACKAGE / where).read_text(), (where, text)


# --------------------------------------------------------------------------- builders


def a_train_record(**extra: Any) -> dict[str, Any]:
    return train_record(
        step=10,
        epoch=0.123456,
        samples=2560,
        loss=1.5,
        lr=3e-3,
        samples_per_s=100.0,
        step_time_s=0.5,
        data_wait_s=0.1,
        data_wait_frac=0.02,
        telemetry={"host_rss_bytes": 1000},
        grad_scale=None,
        skipped_steps=None,
        grad_norm=2.0,
        monitor={"tflops": 0.01},
        **extra,
    )


def test_header_fields_in_order() -> None:
    assert header_record(preset="p", config={}, task={}) == {
        "type": "header", "preset": "p", "config": {}, "task": {}
    }  # fmt: skip
    assert ENGINE_HEADER_FIELDS[0] == "type" and ENGINE_HEADER_FIELDS[-2:] == ("task", "history")
    assert set(HEADER_FIELDS) == {*ENGINE_HEADER_FIELDS, *CLIENT_HEADER_FIELDS}
    with pytest.raises(ValueError, match="hostnme"):
        header_record(preset="p", hostnme="x")
    with pytest.raises(ValueError, match="type"):
        header_record(type="train")


def test_train_record_fields_in_order_and_its_extras_last() -> None:
    rec = a_train_record(tokens_per_s=5.0, metrics={"acc": 0.5}, busy_s=0.3)
    assert list(rec) == [*TRAIN_FIELDS, "tokens_per_s", "acc", "busy_s"]
    assert rec["epoch"] == 0.1235 and rec["mem_peak_bytes"] is None and rec["mfu"] is None
    assert list(a_train_record()) == list(TRAIN_FIELDS)  # the extras only when given
    assert math.isnan(float("nan")) and a_train_record().get("loss") == 1.5


@pytest.mark.parametrize("name", ["loss", "mfu", "busy_s", "rank_step_time_s", "type"])
def test_train_record_refuses_a_task_metric_named_like_a_contract_field(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        a_train_record(metrics={name: 1.0})
    a_train_record(metrics={user_field(name): 1.0})  # user/<name>: the task's own


def test_train_record_refuses_unknown_telemetry_and_monitor_fields() -> None:
    with pytest.raises(ValueError):
        train_record(**{**_train_args(), "telemetry": {"rss": 1}})
    with pytest.raises(ValueError):
        train_record(**{**_train_args(), "monitor": {"flops": 1}})


def _train_args() -> dict[str, Any]:
    return dict(
        step=1, epoch=0.0, samples=1, loss=1.0, lr=0.1, samples_per_s=1.0, step_time_s=1.0,
        data_wait_s=0.0, data_wait_frac=0.0, telemetry={}, grad_scale=None,
        skipped_steps=None, grad_norm=None,
    )  # fmt: skip


def test_script_train_record_order() -> None:
    """type, time, step, epoch, loss, step_time_s, then the rest as logged; telemetry last."""
    values = {"lr": 0.1, "acc": 0.5, "loss": 2.0, "epoch": 1.0, user_field("mfu"): 3.0}
    rec = script_train_record(7, values, step_time_s=0.25)
    assert list(rec) == [
        "type", "time", "step", "epoch", "loss", "step_time_s", "lr", "acc", "user/mfu"
    ]  # fmt: skip
    assert rec["type"] == "train" and rec["step"] == 7 and rec["loss"] == 2.0
    assert list(script_train_record(0, {"loss": None})) == ["type", "time", "step", "loss"]
    add_telemetry(rec, {name: None for name in TELEMETRY_FIELDS})
    assert list(rec)[-len(TELEMETRY_FIELDS) :] == list(TELEMETRY_FIELDS)


@pytest.mark.parametrize("name", ["samples_per_s", "mfu", "type", "step", "busy_s"])
def test_script_train_record_refuses_a_contract_field_it_does_not_measure(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        script_train_record(0, {name: 1.0})


def test_add_telemetry_refuses_an_unknown_field() -> None:
    with pytest.raises(ValueError, match="cpu_temp"):
        add_telemetry({"type": "train"}, {"cpu_temp": 50})


def test_eval_record_order_and_null_for_a_non_finite_value() -> None:
    rec = eval_record(23, {"loss": 0.6, "acc": float("nan"), "bpc": 1.2}, epoch=1 / 3)
    assert list(rec) == [*EVAL_FIELDS, "val_loss", "val_acc", "val_bpc"]
    assert rec["epoch"] == 0.3333 and rec["val_acc"] is None
    assert list(eval_record(4, {"acc": 0.5})) == ["type", "time", "step", "val_acc"]  # a script's
    with pytest.raises(ValueError):
        eval_record(4, {"": 0.5})
    with pytest.raises(ValueError):
        eval_record(4, {3: 0.5})  # type: ignore[dict-item]


def test_event_and_alert_events() -> None:
    assert list(event_record("m", kind="k", path="p")) == [*EVENT_FIELDS, "path"]
    with pytest.raises(ValueError, match="type"):
        event_record("m", type="end")
    alert = alert_event("loss_spike", "stop", "loss 9", 12, outcome="the run stops", loss=9.0)
    assert isinstance(alert.pop("time"), str)
    assert alert == {
        "type": "event", "level": "warning", "message": "alert loss_spike: loss 9 (the run stops)",
        "kind": "alert", "alert": "loss_spike", "action": "stop", "step": 12, "loss": 9.0,
    }  # fmt: skip
    assert alert_event("stall", "warn", "m", None)["message"] == "alert stall: m"
    for bad in ("level", "kind", "type"):
        with pytest.raises(ValueError, match=bad):
            alert_event("x", "warn", "m", 1, **{bad: 1})
    script = script_alert_event("hello: world")
    assert isinstance(script.pop("time"), str)
    assert script == {
        "type": "event", "level": "warning", "message": "hello: world", "kind": "alert",
        "alert": "script",
    }  # fmt: skip


def test_end_record_order_totals_and_carried_fields() -> None:
    end = end_record("completed", "done", 5, samples=10, val_bpc=1.0, weights_digest="ab")
    assert list(end) == [*END_FIELDS, "samples", "val_bpc", "weights_digest"]
    with pytest.raises(ValueError, match="sampels"):
        end_record("completed", "done", 5, sampels=10)
    # tuitrain run repeats a script's own end record (another writer's: not checked)
    last = {"type": "end", "status": "completed", "reason": "r", "step": 3, "elapsed_s": 1.0,
            "foreign": 1, "exit_code": 0}  # fmt: skip
    again = end_record("failed", "exit 3", 3, carried=last, elapsed_s=2.0, exit_code=3)
    assert list(again) == [*END_FIELDS, "elapsed_s", "foreign", "exit_code"]
    assert again["elapsed_s"] == 2.0 and again["exit_code"] == 3 and again["status"] == "failed"
    amended = amended_end(end, "done; ui", ui_failed="boom")
    assert list(amended) == [*list(end), "ui_failed"] and amended["reason"] == "done; ui"
    with pytest.raises(ValueError):
        amended_end(end, "r", ui_broke="boom")
    assert "ui_failed" in END_TOTALS


def test_tagged_adds_the_parity_run() -> None:
    rec = {"type": "train", "step": 1}
    assert tagged(rec, "fp32") == {"type": "train", "step": 1, "run": "fp32"}
    assert list(tagged(rec, "bf16", early=True)) == ["type", "step", "run", "early"]


def test_merge_ranks_as_the_engine_did() -> None:
    rec = a_train_record(tokens_per_s=5.0, metrics={"acc": 0.5}, busy_s=0.3)
    rec["mem_peak_bytes"] = 100
    plan = rank_merge_fields(rec, ("acc",))
    assert plan["acc"] == "mean" and plan["tokens_per_s"] == "sum" and plan["loss"] == "mean"
    columns = {f: [float(rec[f] or 0.0), float(rec[f] or 0.0) * 3] for f in plan}
    columns["mem_peak_bytes"] = [100.0, 300.0]
    columns["busy_s"] = [0.3, 0.6]
    columns["step_time_s"] = [0.5, 0.7]
    merge_ranks(rec, columns)
    assert list(rec) == [*TRAIN_FIELDS, "tokens_per_s", "acc", "rank_step_time_s", "rank_busy_s",
                         "rank_mem_peak_bytes", "rank_host_rss_bytes"]  # fmt: skip
    assert rec["rank_mem_peak_bytes"] == [100, 300]
    assert rec["samples_per_s"] == 400.0 and rec["loss"] == 3.0 and rec["acc"] == 1.0
    assert rec["mem_peak_bytes"] == 300 and isinstance(rec["mem_peak_bytes"], int)
    assert rec["mem_alloc_bytes"] is None  # null on this rank: stays null
    assert rec["step_time_s"] == 0.7 and rec["rank_step_time_s"] == [0.5, 0.7]
    assert rec["rank_busy_s"] == [0.3, 0.6] and rec["tokens_per_s"] == 20.0


def test_merge_ranks_nan_loss_and_one_rank() -> None:
    rec = a_train_record()
    merge_ranks(rec, {"loss": [1.0, float("nan")], "step_time_s": [0.5, 0.4]})
    assert rec["loss"] is None and rec["step_time_s"] == 0.5
    one = a_train_record()
    merge_ranks(one, {"step_time_s": [one["step_time_s"]]})
    assert list(one) == [*TRAIN_FIELDS, "rank_step_time_s"] and one["rank_step_time_s"] == [0.5]
    with pytest.raises(ValueError, match="nonsense"):
        merge_ranks(a_train_record(), {"nonsense": [1.0], "step_time_s": [1.0]})


def test_contract_fields_hold_every_train_field() -> None:
    assert set(TRAIN_FIELDS) | set(MONITOR_FIELDS) <= CONTRACT_FIELDS


# --------------------------------------------------------------------------- writers


class Keep(NullSink):
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Any) -> None:
        self.records.append(dict(record))


def test_the_engine_writes_each_record_in_the_contract_order(tiny_config) -> None:
    from tuitrain.engine.runner import run

    sink = Keep()
    run(tiny_config("train.max_steps=2", "train.log_every=1", 'train.device="cpu"'), sink)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for rec in sink.records:
        by_type.setdefault(rec["type"], []).append(rec)
    assert list(by_type["header"][0]) == list(ENGINE_HEADER_FIELDS)
    for rec in by_type["train"]:
        assert list(rec)[: len(TRAIN_FIELDS)] == list(TRAIN_FIELDS)
    for rec in by_type.get("eval", []):
        assert list(rec)[:4] == list(EVAL_FIELDS)
        assert all(k.startswith("val_") for k in list(rec)[4:])
    (end,) = by_type["end"]
    assert list(end)[:5] == list(END_FIELDS)
    totals = [k for k in end if k not in END_FIELDS and not k.startswith("val_")]
    assert totals == [k for k in END_TOTALS if k in totals]  # END_TOTALS' order
    assert end["weights_digest"] == list(end.values())[-1]


def test_the_client_writes_its_header_in_the_contract_order(tmp_path: Path) -> None:
    import tuitrain

    run = tuitrain.init(tmp_path / "run")
    run.log({"loss": 1.0, "val/acc": 0.5})
    run.finish()
    import json

    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    header = list(records[0])
    assert header == [f for f in HEADER_FIELDS if f in header]  # HEADER_FIELDS' order
    assert set(CLIENT_HEADER_FIELDS) <= set(header)
    # the event says `val/acc` is written as `val_acc` (records.names_event)
    assert [r["type"] for r in records] == ["header", "event", "train", "eval", "end"]
    assert records[1]["names"] == {"val_acc": "val/acc"}
