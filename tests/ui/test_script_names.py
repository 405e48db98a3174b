"""A script's own names kept beside the contract's (an alias, not a rename): the client writes
`train_loss` as `loss`, `eval_top1` as `val_top1`, `validation/loss` as `val_loss`, and says so
once in a `names` event; export, the metrics screen and its filter find each by the script's
name, and the runs table and the ending read the contract's fields as before."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tuitrain.client import core as client
from tuitrain.commands.export import main as export
from tuitrain.metrics.records import NAMES_KIND, aliases
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.ending import ending_lines
from tuitrain.rundir.read import read_records
from tuitrain.rundir.summary import cells, summarize_run
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.metrics import MetricsScreen, matching, metric_specs

NAMES = {"loss": "train_loss", "val_top1": "eval_top1", "val_loss": "validation/loss"}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A script's run as timm and ignite name their metrics: a flush a step, two evals."""
    folder = tmp_path / "run"
    run = client.Run(folder, name="names", flush_every=10**9, flush_s=3600.0)
    for step in range(6):
        run.log({"train_loss": 1.0 / (step + 1), "step": step}, step=step)
        if step in (2, 5):
            run.log({"eval_top1": 0.5 + step / 20, "validation/loss": 0.9 - step / 10}, step=step)
        run._flush(final=True)  # a flush a step: the names are said at the first only
    run.finish()
    return folder


def test_the_client_says_each_scripts_name_once(run_dir: Path) -> None:
    recs = list(read_records(run_dir / "metrics.jsonl"))
    said = [r for r in recs if r["type"] == "event" and r.get("kind") == NAMES_KIND]
    # the flush that first writes a field names it; the four later ones repeat nothing
    assert [r["names"] for r in said] == [
        {"loss": "train_loss", "user/step": "step"},
        {"val_top1": "eval_top1", "val_loss": "validation/loss"},
    ]
    assert said[1]["message"] == "names: eval_top1 as val_top1, validation/loss as val_loss"
    assert aliases(recs) == {**NAMES, "user/step": "step"}
    trains = [r for r in recs if r["type"] == "train"]
    assert [r["loss"] for r in trains][:2] == [1.0, 0.5]  # the field every reader charts
    assert "train_loss" not in trains[0]
    evals = [r for r in recs if r["type"] == "eval"]
    assert evals[0]["val_top1"] == pytest.approx(0.6) and evals[0]["val_loss"] == pytest.approx(0.7)
    first = recs.index(said[0])
    assert first < recs.index(trains[0])  # ahead of the records that hold the fields


def test_export_has_a_column_under_each_scripts_name(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    assert export([str(run_dir), "--format", "csv", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    columns = list(rows[0])
    for field, name in NAMES.items():  # both names, the script's right after the field
        assert columns.index(name) == columns.index(field) + 1
        assert [r[name] for r in rows] == [r[field] for r in rows]
    assert "step" in columns and columns.count("step") == 1  # a user's `step` is user/step
    assert [r["user/step"] for r in rows if r["type"] == "train"] == [f"{s}.0" for s in range(6)]
    assert [r["eval_top1"] for r in rows if r["type"] == "eval"] == ["0.6", "0.75"]
    assert [r["train_loss"] for r in rows if r["type"] == "train"][1] == "0.5"


def test_export_to_standard_output_too(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert export([str(run_dir), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert {"train_loss", "eval_top1", "validation/loss", "loss", "val_top1"} <= set(header)


def store_of(run_dir: Path) -> MetricStore:
    store = MetricStore()
    for record in read_records(run_dir / "metrics.jsonl"):
        store.push(record)
    return store


def test_the_metrics_filter_finds_a_field_by_the_scripts_name(run_dir: Path) -> None:
    snap = store_of(run_dir).snapshot()
    specs = metric_specs(snap)
    assert [s["name"] for s in matching(specs, "EVAL_top1")[0]] == ["val_top1"]
    assert [s["name"] for s in matching(specs, "validation/")[0]] == ["val_loss"]
    assert [s["name"] for s in matching(specs, "train_loss")[0]] == ["loss"]


async def test_the_metrics_screen_shows_and_finds_the_scripts_names(run_dir: Path) -> None:
    app = TuitrainApp(store=store_of(run_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        titles = {name: str(chart.border_title) for name, chart in screen.charts.items()}
        assert titles["val_top1"].startswith("val_top1 (eval_top1) 0.7500")
        assert titles["loss"].startswith("loss (train_loss) ")
        await pilot.press("slash", *"eval_top1", "enter")
        await pilot.pause()
        assert list(screen.charts) == ["val_top1"]


def test_the_runs_table_and_the_ending_read_the_contracts_fields(run_dir: Path) -> None:
    summary = summarize_run(run_dir)
    assert summary is not None and summary.status == "completed" and summary.steps == 5
    assert summary.best_metric == "val_top1" and summary.best == pytest.approx(0.75)
    assert any("75" in cell for cell in cells(summary))
    lines = ending_lines(run_dir)
    assert "completed" in lines[0] and not any("error" in line for line in lines)
    json.dumps(summary.to_json())  # the runs table's --json
