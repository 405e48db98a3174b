"""Which panels a run gets and what they list (tuitrain.ui.panels), without an app."""

from __future__ import annotations

import re
from pathlib import Path

from tests.ui.fake_records import charlm_records, filled_store, script_records, store_of
from tuitrain.metrics.records import eval_record
from tuitrain.metrics.store import Snapshot
from tuitrain.ui.panels import (
    SCRIPT_PANELS,
    all_metric_specs,
    config_items,
    eval_label,
    is_script_run,
    panel_ids,
    panel_metric_specs,
    spark_bars,
    spark_range,
    summary_items,
    throughput_unit,
)


def plain(markup: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", markup)


def names(specs: list[dict]) -> list[str]:
    return [s["name"] for s in specs]


def test_a_script_run_gets_config_and_summary_not_the_engines_panels() -> None:
    snap = store_of(script_records()).snapshot()
    assert is_script_run(snap.header)
    ids = panel_ids(snap.header)
    assert ids == SCRIPT_PANELS
    assert {"config", "summary", "metrics"} <= set(ids)
    assert not {"scaler", "datawait", "overview"} & set(ids)  # hosted-only: dead for a script
    assert throughput_unit(snap) == "steps"


def test_engine_runs_keep_the_training_dashboard() -> None:
    fp16 = filled_store("fp16").snapshot()
    assert not is_script_run(fp16.header)
    assert panel_ids(fp16.header) == (
        "loss", "throughput", "memory", "scaler", "datawait", "overview",
    )  # fmt: skip
    bf16 = filled_store("bf16", "cpu").snapshot()
    assert "scaler" not in panel_ids(bf16.header)  # no GradScaler: the run's metrics instead
    assert "metrics" in panel_ids(bf16.header)
    assert throughput_unit(bf16) == "samples"


def test_before_the_header_a_hosted_script_is_still_a_script() -> None:
    assert panel_ids(None) == ("loss", "throughput", "memory", "scaler", "datawait", "overview")
    assert panel_ids(None, script=True) == SCRIPT_PANELS


def test_a_language_model_counts_tokens_and_declares_units() -> None:
    snap = store_of(charlm_records()).snapshot()
    assert throughput_unit(snap) == "tokens"
    specs = {s["name"]: s for s in all_metric_specs(snap)}
    assert specs["val_loss"]["unit"] == "nats/char"
    assert names(panel_metric_specs(snap)) == ["val_bpc", "lr", "grad_norm"]


def test_every_series_gets_a_chart_own_metrics_first() -> None:
    snap = store_of(script_records()).snapshot()
    got = names(all_metric_specs(snap))
    assert got[:2] == ["loss", "val_loss"]
    assert set(got) == set(snap.series)  # lr, grad_norm, step time and every script key
    assert got.index("train/acc") < got.index("lr") and got.index("val_acc") < got.index("lr")
    cnn = filled_store().snapshot()
    got = names(all_metric_specs(cnn))
    assert {"lr", "grad_norm", "loss", "step_time_s", "val_acc", "samples_per_s"} <= set(got)
    assert "epoch" not in got and "samples" not in got


def test_the_metrics_panel_lists_the_runs_own_metrics() -> None:
    snap = store_of(script_records()).snapshot()
    assert names(panel_metric_specs(snap)) == ["train/acc", "tiny", "val_acc", "lr", "grad_norm"]
    cnn = filled_store("bf16", "cpu").snapshot()
    assert names(panel_metric_specs(cnn)) == ["val_acc", "lr", "grad_norm"]


def test_config_and_summary_of_a_script() -> None:
    snap = store_of(script_records()).snapshot()
    assert ("lr", "0.05") in config_items(snap.header)
    assert ("project", "demo") in config_items(snap.header)
    summary = dict(summary_items(snap))
    assert summary["tiny"] == "1.794e-10"  # its digits, not 0.0000
    assert summary["best_acc"] == "0.9300"
    live = dict(summary_items(store_of(script_records(end=False)).snapshot()))
    assert live["train/acc"] != "—" and "val_acc" in live  # the last values so far


def test_eval_labels() -> None:
    assert eval_label(eval_record(50, {"loss": 1.0})) == "eval at step 50"  # a script's
    assert eval_label(eval_record(400, {"loss": 1.0}, epoch=2.0)) == "epoch 2 done"
    assert eval_label(eval_record(20, {"loss": 1.0}, epoch=0.17)) == "eval at step 20"


def test_a_one_percent_wobble_is_no_cliff() -> None:
    flat = [3560.0 + (36.0 if i % 2 else 0.0) for i in range(40)]  # 1% up and down
    bars = spark_bars(flat, 20)
    assert len(bars) == 20
    levels = {"▁▂▃▄▅▆▇█".index(c) for c in bars}
    assert max(levels) - min(levels) <= 1  # a ripple, not the full height
    falling = [2.0 - i * 0.04 for i in range(40)]  # a loss that halves: the full height
    bars = spark_bars(falling, 20)
    assert bars[0] == "█" and bars[-1] == "▁"


def test_spark_range_edges() -> None:
    assert spark_range([]) is None
    assert spark_range([float("nan")]) is None
    lo, hi = spark_range([0.0, 0.0])  # type: ignore[misc]
    assert lo < 0 < hi
    lo, hi = spark_range([100.0, 101.0])  # type: ignore[misc]
    assert hi - lo >= 10.0
    assert spark_bars([1.0, 2.0], 0) == ""
    assert spark_bars([float("nan")] * 4, 4) == "    "


def test_an_empty_snapshot_has_no_metrics() -> None:
    snap = Snapshot()
    assert all_metric_specs(snap) == [] and panel_metric_specs(snap) == []
    assert summary_items(snap) == [] and config_items(None) == []


def test_a_language_model_speaks_tokens_before_its_first_log_point() -> None:
    snap = store_of(charlm_records()[:1]).snapshot()  # the header only
    assert throughput_unit(snap) == "tokens"


def test_a_sign_of_life_before_the_first_log_point() -> None:
    from tuitrain.ui.view import Frame, StepClock
    from tuitrain.ui.widgets.status import StatusBar

    clock = StepClock()
    assert clock.seconds_per_step(0, now=100.0) is None  # the first look
    assert clock.seconds_per_step(0, now=160.0) is None  # no step finished yet
    assert clock.seconds_per_step(8, now=160.0) == 7.5
    assert clock.seconds_per_step(0, now=200.0) is None  # a new run starts over
    header_only = store_of(charlm_records()[:1]).snapshot()
    line = plain(StatusBar().progress_line(Frame(header_only, live_step=8, live_step_s=7.5)))
    assert "step 8/150 (7.50 s/step)" in line
    assert "ETA 17:45" in line  # 142 steps to go at 7.5 s: not a dash
    script = store_of(script_records()).snapshot()
    line = plain(StatusBar().progress_line(Frame(script)))
    assert "step 199" in line and "epoch" not in line and "ETA" not in line  # no total


def test_config_set_after_init_survives_the_file_and_reaches_the_config_rows(
    tmp_path: Path,
) -> None:
    """`wandb.config.update({"batch": 32})` after init is a `config` event with flat keys:
    read back from metrics.jsonl (every viewer's path) they are kept, not cleaned away as a
    header's non-table sections are, and an empty update adds no row."""
    import json

    from tuitrain.metrics.records import event_record, header_record
    from tuitrain.rundir.read import read_records

    lines = [
        header_record(preset="s", config={"script": {"lr": 0.05}, "junk": 3}),
        event_record("config updated", kind="config", config={"batch": 32}),
        event_record("config updated", kind="config", config={}),
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    header, update, empty = list(read_records(path))
    assert "junk" not in header["config"]  # a header keeps its tables only
    assert update["config"] == {"batch": 32}
    assert config_items({"config": update["config"]}) == [("batch", "32")]
    assert config_items({"config": empty["config"]}) == []
