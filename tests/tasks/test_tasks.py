"""Any model, any loss: a user's task in a preset, the charlm task, the task contract's errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.test_trainer import ListSink  # records in order, and a store
from tuitrain.core.config import load_preset
from tuitrain.core.errors import EXIT_USAGE
from tuitrain.engine import run
from tuitrain.engine.data.text import Vocabulary, load_text
from tuitrain.engine.tasks.charlm import CharLMTask

HERE = Path(__file__).resolve().parent
REGRESSION = str(HERE / "regression.toml")


def regression(*overrides: str):
    return load_preset(REGRESSION, list(overrides))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_user_regression_task_trains_with_its_own_metric(precision: str) -> None:
    sink = ListSink()
    result = run(regression(f"train.precision={precision}"), sink)
    assert result.status == "completed", result.reason
    header = sink.of("header")[0]
    task = header["task"]
    assert task["primary"] == "val_mae" and task["mode"] == "min"
    declared = {m["name"]: m for m in task["metrics"]}
    assert declared["mae"]["split"] == "train" and declared["val_mae"]["goal"] == "min"
    trains, evals = sink.of("train"), sink.of("eval")
    assert trains and all(isinstance(r["mae"], float) and r["mae"] > 0 for r in trains)
    assert len(evals) == 3 and all({"val_loss", "val_mae"} <= set(r) for r in evals)
    assert "val_acc" not in evals[-1]
    # it learns: the val error falls from the first evaluation to the last
    assert evals[-1]["val_mae"] < evals[0]["val_mae"]
    # mean absolute error <= root mean squared error, item by item averaged: a real average
    assert evals[-1]["val_mae"] <= math.sqrt(evals[-1]["val_loss"]) + 1e-6
    assert result.val_metrics["val_mae"] == evals[-1]["val_mae"]
    assert result.val_correct is not None and result.val_correct.shape == (128,)
    end = sink.of("end")[0]
    assert end["val_mae"] == evals[-1]["val_mae"]


def test_dict_batches_reach_the_task_as_dicts() -> None:
    sink = ListSink()
    cfg = regression(
        "task.name='tests.tasks.user_tasks:dict_regression_task'",
        "data.name='tests.tasks.user_tasks:dict_data'",
        "train.epochs=1",
    )
    result = run(cfg, sink)
    assert result.status == "completed", result.reason
    assert sink.of("eval")[-1]["val_mae"] > 0
    assert sink.of("train")[-1]["samples"] == 16 * 32  # batch_size(batch) from the dict


def test_a_nan_metric_is_null_in_the_record_and_an_alert() -> None:
    sink = ListSink()
    result = run(regression("task.name='tests.tasks.user_tasks:nan_metric_task'"), sink)
    assert result.status == "completed"
    assert all(r["ratio"] is None for r in sink.of("train"))
    alerts = [r for r in sink.of("event") if r.get("alert") == "nonfinite_metric"]
    assert len(alerts) == 1 and alerts[0]["metrics"] == ["ratio"]  # once per episode


def test_a_task_metric_named_like_a_contract_field_never_replaces_it() -> None:
    sink = ListSink()
    result = run(regression("task.name='tests.tasks.user_tasks:contract_names_task'"), sink)
    assert result.status == "completed", result.reason
    trains = sink.of("train")
    assert trains and all(r["type"] == "train" for r in trains)
    for r in trains:  # the user's values under their own names, the engine's figures intact
        assert r["user/grad_norm"] == 1234.0 and r["user/samples_per_s"] == -1.0
        assert r["user/mfu"] == 0.5 and r["user/type"] == 3.0
        assert r["grad_norm"] != 1234.0 and r["samples_per_s"] > 0
    declared = {m["name"]: m for m in sink.of("header")[0]["task"]["metrics"]}
    assert declared["user/mfu"]["format"] == "pct"  # its declaration follows it
    assert "mfu" not in declared and "grad_norm" not in declared


@pytest.mark.parametrize(
    ("task", "words"),
    [
        ("tests.tasks.user_tasks:scalar_loss_missing_task", "training_step returned a str"),
        ("tests.tasks.user_tasks:nowhere", "has no attribute"),
        ("nosuch", "is unknown; use classify, charlm"),
    ],
)
def test_a_task_that_does_not_fit_is_one_sentence(task: str, words: str) -> None:
    sink = ListSink()
    result = run(regression(f"task.name='{task}'"), sink)
    assert result.status == "failed" and result.exit_code == EXIT_USAGE
    assert words in result.reason and not result.is_bug
    assert not sink.of("header")  # refused before the header


def test_charlm_vocabulary_round_trips_and_the_text_is_shipped() -> None:
    text = load_text()
    assert len(text) > 1_000_000 and "Hamlet" in text
    vocab = Vocabulary(text)
    assert vocab.decode(vocab.encode("To be, or not to be").tolist()) == "To be, or not to be"


def tiny_charlm(*overrides: str):
    return load_preset(
        "charlm-mini",
        [
            "model.layers=1",
            "model.width=32",
            "model.heads=2",
            "data.context=32",
            "data.batch_size=8",
            "data.val_samples=16",
            "train.max_steps=6",
            "train.log_every=3",
            *overrides,
        ],
    )


def test_charlm_records_tokens_bits_per_character_and_a_reproducible_sample(tmp_path) -> None:
    samples = []
    for _ in range(2):
        sink = ListSink()
        result = run(tiny_charlm(), sink)
        assert result.status == "completed", result.reason
        trains, evals = sink.of("train"), sink.of("eval")
        assert all(r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 32) for r in trains)
        assert trains[-1]["mfu"] is None or trains[-1]["tflops"] > 0
        assert sink.of("header")[0]["flops_per_sample"] > 0
        last = evals[-1]
        assert last["val_bpc"] == pytest.approx(last["val_loss"] / math.log(2))
        assert sink.of("header")[0]["task"]["primary"] == "val_loss"
        events = [r for r in sink.of("event") if r.get("kind") == "sample"]
        assert len(events) == 1 and len(events[0]["text"]) == 200
        samples.append(events[0]["text"])
    assert samples[0] == samples[1]  # seeded: the same run gives the same text


def test_charlm_task_counts_tokens_and_reports_per_sequence_losses() -> None:
    import torch

    task = CharLMTask()
    x = torch.randint(0, 5, (3, 4))
    assert task.tokens((x, x)) == 12
    model = torch.nn.Sequential(torch.nn.Embedding(5, 5))
    out = task.validation_step(model, (x, x))
    assert out["loss"].shape == (3,) and out["bpc"].shape == (3,)


@pytest.mark.slow
def test_a_user_task_runs_from_the_command_line(tmp_path: Path, repo_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--preset", REGRESSION, "--no-ui",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=repo_root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mae " in done.stdout and "val_mae " in done.stdout
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").open()]
    assert records[0]["task"]["primary"] == "val_mae"


def test_export_carries_the_tasks_metrics(tmp_path: Path) -> None:
    import csv

    from tuitrain.commands.export import main as export_main
    from tuitrain.engine.tensorboard import scalars
    from tuitrain.metrics.sinks import JsonlSink

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sink = JsonlSink(run_dir / "metrics.jsonl")
    try:
        run(regression("train.epochs=1"), sink)
    finally:
        sink.close()
    out = tmp_path / "out.csv"
    assert export_main([str(run_dir), "--format", "csv", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert {"mae", "val_mae", "val_loss"} <= set(rows[0]) and "val_acc" not in rows[0]  # declared
    assert all(float(r["mae"]) > 0 for r in rows if r["type"] == "train")
    evals = [r for r in rows if r["type"] == "eval"]
    assert evals and float(evals[-1]["val_mae"]) > 0 and evals[-1]["mae"] == ""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    tags = {tag for r in records for tag, _, _ in scalars(r)}
    assert {"train/mae", "val/mae", "val/loss", "train/loss"} <= tags
    end = records[-1]  # the task's primary first, no field of another task's (no accuracy)
    assert [k for k in end if k.startswith("val_")] == ["val_mae", "val_loss"]
    assert end["val_mae"] == float(evals[-1]["val_mae"])


def test_parity_judges_the_tasks_primary_metric_with_a_paired_interval() -> None:
    from tuitrain.engine.parity import parity

    cfg = regression("train.epochs=1")
    result = parity(cfg, epochs=1, mixed="bf16", early_steps=4)
    m = result.metric
    assert m is not None and m.name == "val_mae" and m.items == 128
    assert m.tolerance == 0.05 and m.tolerance_source == "the task's own tolerance"
    assert m.ci95 is not None and m.ci95[0] <= m.gap <= m.ci95[1]
    assert result.verdict == ("PASS" if abs(m.gap) <= 0.05 else "FAIL")
    assert result.paired is None  # McNemar is classification's
    data = result.to_json()
    assert data["metric"]["name"] == "val_mae" and data["verdict"] == result.verdict
    assert "val_mae" in result.summary()
    strict = parity(regression("train.epochs=1", "task.tolerance=1e-12"), 1, "bf16", early_steps=0)
    assert strict.metric is not None and strict.metric.tolerance_source == "task.tolerance"
    assert strict.verdict == "FAIL" and strict.exit_code == 3  # bf16 moves the metric a little


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )  # fmt: skip


def train_records(run_dir: Path) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "metrics.jsonl").open():
        record = json.loads(line)
        if record["type"] in ("train", "eval"):
            out.setdefault(record["step"], {}).update(record)
    return out


@pytest.mark.slow
def test_a_task_resumes_bit_identically_mid_interval(tmp_path: Path, repo_root: Path) -> None:
    """Step 6 is inside a log interval (log_every 4): the task's metric sums of steps 5-6
    come back from the checkpoint, so the straight and the resumed runs log the same mae."""
    import shutil

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    args = ["--preset", REGRESSION, "--no-ui", "--set", "checkpoint.every_steps=6",
            "--set", "checkpoint.keep=20"]  # fmt: skip
    done = cli(*args, "--run-dir", str(straight), cwd=repo_root)
    assert done.returncode == 0, done.stderr
    (resumed / "checkpoints").mkdir(parents=True)
    ckpt = resumed / "checkpoints" / "ckpt-step00000006.pt"
    shutil.copy(straight / "checkpoints" / "ckpt-step00000006.pt", ckpt)
    done = cli("--resume", str(ckpt), "--preset", REGRESSION, cwd=repo_root)
    assert done.returncode == 0, done.stderr
    a, b = train_records(straight), train_records(resumed)
    assert sorted(b)[0] == 8 and sorted(b)[-1] == 48
    for step in b:
        for key in ("loss", "mae", "val_mae", "val_loss"):
            assert a[step].get(key) == b[step].get(key), (step, key)


@pytest.mark.slow
def test_a_task_trains_under_ddp_with_its_metrics_merged(tmp_path: Path, repo_root: Path) -> None:
    """Two gloo ranks: the dataset's own batches sharded by a DistributedSampler, the task's
    train metric averaged over the ranks at log points, one eval per epoch on rank 0."""
    run_dir = tmp_path / "ddp"
    done = cli("--preset", REGRESSION, "--nproc", "2", "--no-ui", "--set", "train.epochs=1",
               "--run-dir", str(run_dir), cwd=repo_root)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    header = records[0]
    assert header["world_size"] == 2 and header["task"]["primary"] == "val_mae"
    trains = [r for r in records if r["type"] == "train"]
    assert len(trains) == 2 and all(r["mae"] > 0 for r in trains)  # 512 / 2 / 32 = 8 steps
    assert len(trains[0]["rank_step_time_s"]) == 2
    assert [r for r in records if r["type"] == "eval"][-1]["val_mae"] > 0


@pytest.mark.slow
def test_a_checkpoint_naming_a_task_factory_is_not_trusted_by_itself(
    tmp_path: Path, repo_root: Path
) -> None:
    """Resuming imports and calls the task factory the checkpoint names: only when the user
    names it too (a --set or the preset), as for the model and data factories."""
    run_dir = tmp_path / "run"
    done = cli("--preset", REGRESSION, "--no-ui", "--run-dir", str(run_dir), cwd=repo_root)
    assert done.returncode == 0, done.stderr
    ckpt = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    trusted = ["--set", "model.name='tests.tasks.user_tasks:regressor'",
               "--set", "data.name='tests.tasks.user_tasks:regression_data'"]  # fmt: skip
    done = cli("--resume", str(ckpt), "--epochs", "4", *trusted, cwd=repo_root)
    assert done.returncode == 2
    assert "names task.name = 'tests.tasks.user_tasks:regression_task'" in done.stderr
    task = ["--set", "task.name='tests.tasks.user_tasks:regression_task'"]
    done = cli("--resume", str(ckpt), "--epochs", "4", *trusted, *task, cwd=repo_root)
    assert done.returncode == 0, done.stderr
