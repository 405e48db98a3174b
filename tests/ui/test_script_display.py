"""How a script's run reads on the dashboard (`tuitrain run`, `watch`): the evaluation shows
what it has, a metric keeps one format on both splits, one point is a mark, tick labels
differ, memory is charted in its unit, test metrics after training make no throughput spike,
and the Config pane lists a key once."""

from __future__ import annotations

from pathlib import Path

from tuitrain.client import core as client
from tuitrain.client.core import SCRIPT_TASK
from tuitrain.metrics.records import event_record, header_record
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.read import read_records
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.panels import (
    declared_metrics,
    metric_spec,
    metric_text,
    script_config_items,
    spark_rows,
    summary_items,
)
from tuitrain.ui.screens.metrics import MetricsScreen
from tuitrain.ui.view import Frame
from tuitrain.ui.widgets.chart import distinct_ticks, format_tick, nice_ticks
from tuitrain.ui.widgets.loss import LossPanel
from tuitrain.ui.widgets.metrics_panel import metric_rows


def script_store(*records: dict) -> MetricStore:
    store = MetricStore()
    store.push(header_record(preset="script", config={"script": {"lr": 0.1}}, client=True,
                             task=SCRIPT_TASK))  # fmt: skip
    for step in range(1, 5):
        store.push({"type": "train", "step": step, "loss": 1.0 / step, "acc": 0.9844})
    for record in records:
        store.push(record)
    return store


def loss_summary(store: MetricStore) -> str:
    return LossPanel().summary(Frame(store.snapshot()))


def test_a_scripts_evaluation_shows_what_it_has() -> None:
    accuracy_only = loss_summary(script_store({"type": "eval", "step": 4, "val_acc": 0.9844}))
    val = accuracy_only.splitlines()[1]
    assert "acc 98.44%" in val and "—" not in val  # was "val —  (step 4)"
    other = loss_summary(script_store({"type": "eval", "step": 4, "val_nll": 0.25}))
    assert "nll 0.2500" in other.splitlines()[1] and "—" not in other.splitlines()[1]
    both = loss_summary(script_store({"type": "eval", "step": 4, "val_loss": 0.5, "val_acc": 1}))
    assert "val[/] 0.5000  [b]acc 100.0%[/b]" in both  # the loss first, as before


def test_a_metric_has_one_format_on_both_splits() -> None:
    store = script_store({"type": "eval", "step": 4, "val_acc": 0.9844})
    snap = store.snapshot()
    declared = declared_metrics(snap.header)
    for name in ("acc", "train/acc", "train_acc", "val_acc", "val/acc"):
        assert metric_text(0.9844, metric_spec(name, declared)) == "98.44%", name
    rows = metric_rows(snap, 80)
    assert sum("98.44%" in row for row in rows) == 2 and not any("0.9844" in r for r in rows)
    store.push({"type": "end", "status": "completed", "summary": {"acc": 0.9844,
                "val/acc": 0.9844}})  # fmt: skip
    assert summary_items(store.snapshot()) == [("acc", "98.44%"), ("val/acc", "98.44%")]


def test_one_value_is_a_mark_not_a_wall() -> None:
    rows = spark_rows([5.0], 20, 3)
    assert sum(cell != " " for row in rows for cell in row) == 1  # was 40 filled cells
    assert rows[1][0] != " "  # its level: the middle of the range


def test_tick_labels_never_repeat() -> None:
    pct = nice_ticks(98.2, 98.6, 4)  # a share in percent, as the metrics screen draws it
    labels = [label for _, label in distinct_ticks(pct, lambda t: f"{format_tick(t)}%")]
    assert labels == ["98.2%", "98.3%", "98.4%", "98.5%"]  # was "98%" four times
    labels = [label for _, label in distinct_ticks(nice_ticks(12000, 12400, 4), format_tick)]
    assert len(set(labels)) == len(labels) and labels[:2] == ["12k", "12.1k"]
    own = distinct_ticks(nice_ticks(0.98, 0.99, 4), lambda t: f"{t * 100:.0f}%")
    assert [label for _, label in own] == ["98%", "99%"]  # fewer ticks, each label once
    assert distinct_ticks([0.2, 0.4], format_tick) == [(0.2, "0.2"), (0.4, "0.4")]


async def test_a_memory_chart_is_drawn_in_its_titles_unit() -> None:
    store = MetricStore()
    store.push(header_record(preset="script", config={}, client=True, task=SCRIPT_TASK))
    for step in range(1, 6):
        store.push({"type": "train", "step": step, "loss": 1.0, "host_rss_bytes": step << 30})
    app = TuitrainApp(store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        chart = screen.charts["host_rss_bytes"]
        assert "5.00 GiB" in str(chart.border_title)
        for _ in range(20):
            if chart.plt.monitor.y:
                break
            await pilot.pause(0.05)
        assert max(chart.plt.monitor.y[0]) == 5.0  # GiB, not 5368709120 bytes
        assert chart.border_subtitle == "y in GiB"


def test_test_metrics_after_training_are_no_training_step(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run", flush_every=10**9, flush_s=3600.0)
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1)})
    run.log({"test/acc": 0.9})  # the next step, a moment later: no training step
    run.finish()
    trains = [r for r in read_records(tmp_path / "run" / "metrics.jsonl") if r["type"] == "train"]
    assert trains[-1]["test/acc"] == 0.9 and "step_time_s" not in trains[-1]
    assert all(r.get("step_time_s") is not None for r in trains[1:-1])
    # a script that logs no loss is timed by every row, as before
    run = client.Run(tmp_path / "other", flush_every=10**9, flush_s=3600.0)
    for step in range(3):
        run.log({"reward": float(step)})
    run.finish()
    rows = [r for r in read_records(tmp_path / "other" / "metrics.jsonl") if r["type"] == "train"]
    assert all(r.get("step_time_s") is not None for r in rows[1:])


def test_the_config_pane_lists_a_key_once_with_its_last_value() -> None:
    header = header_record(preset="s", config={"script": {"lr": 0.1, "seed": 1}}, client=True)
    stages = [
        event_record("config updated", kind="config", config={"lr": lr, "batch": 32})
        for lr in (0.1, 0.2, 0.3)  # Lightning's fit, test and predict each send theirs
    ]
    assert script_config_items(header, stages) == [("lr", "0.3"), ("seed", "1"), ("batch", "32")]
