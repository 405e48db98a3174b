"""The wandb surface real scripts touch (issue "Your script, first class")."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tuitrain
import tuitrain.wandb as wandb
from tuitrain.client import core as client


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def of(recs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in recs if r.get("type") == kind]


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TUITRAIN_RUN_DIR", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    dict.clear(wandb.config)
    yield
    wandb.finish()
    client.finish()
    dict.clear(wandb.config)


def test_config_takes_a_namespace_and_gives_as_dict(tmp_path: Path) -> None:
    run = wandb.init(dir=str(tmp_path))
    wandb.config.update(argparse.Namespace(lr=0.1, batch=8))
    assert wandb.config.as_dict() == {"lr": 0.1, "batch": 8}
    wandb.config.setdefaults(argparse.Namespace(lr=9.0, width=4))
    assert wandb.config.lr == 0.1 and wandb.config.width == 4
    wandb.finish()
    events = [r["config"] for r in of(records(run.dir), "event") if r.get("kind") == "config"]
    assert events == [{"lr": 0.1, "batch": 8}, {"width": 4}]


def test_unsupported_names_are_harmless_and_errors_are_exceptions(tmp_path: Path) -> None:
    wandb.init(dir=str(tmp_path))
    assert wandb.AlertLevel.WARN.value == "WARN"
    wandb.alert(title="t", text="x", level=wandb.AlertLevel.WARN)
    wandb.plot.line(wandb.Table(data=[[1, 2]], columns=["a", "b"]), "a", "b", title="t")
    image = wandb.Image(np.zeros((2, 2)))
    assert isinstance(image, wandb.Image)
    wandb.log({"chart": wandb.plot.line(), "loss": 1.0})
    assert issubclass(wandb.errors.CommError, wandb.errors.Error)
    assert issubclass(wandb.errors.Error, Exception)
    try:
        raise wandb.errors.CommError("no network")
    except wandb.errors.CommError as exc:
        assert str(exc) == "no network"
    assert wandb.errors.SomethingElse is wandb.errors.Error
    run_dir = wandb.run.dir
    wandb.finish()
    alerts = [r for r in of(records(run_dir), "event") if r.get("alert") == "script"]
    assert alerts and alerts[0]["level"] == "warning"


def test_the_run_object_has_wandbs_attributes(tmp_path: Path) -> None:
    run = wandb.init(
        project="proj", name="trial", dir=str(tmp_path), tags=["a", "b"], notes="n", group="g"
    )
    assert run.id == Path(run.dir).name == "tuitrain-trial" and run.name == "trial"
    assert isinstance(run.dir, str)  # as wandb's
    assert run.project == "proj" and run.tags == ("a", "b") and run.notes == "n"
    assert run.group == "g" and run.url is None and run.path == "proj/tuitrain-trial"
    assert Path(run.dir).parent == tmp_path and run.step == 0
    wandb.log({"loss": 1.0})
    assert run.step == 1 and wandb.run is run
    wandb.finish()
    header = records(run.dir)[0]
    assert header["config"]["meta"] == {"project": "proj", "tags": ["a", "b"], "notes": "n",
                                        "group": "g"}  # fmt: skip
    assert "wandb" not in header["config"]["script"] and "wandb" not in wandb.config
    # a second run with the same name and dir is its own run (a sweep's trials)
    second = wandb.init(name="trial", dir=str(tmp_path))
    assert second.id == "tuitrain-trial-2"


def test_summary_holds_the_last_value_at_once(tmp_path: Path) -> None:
    wandb.init(dir=str(tmp_path), config={"lr": 1})
    wandb.log({"loss": 2.0, "acc": np.float32(0.5)})
    assert wandb.summary["loss"] == 2.0 and wandb.summary["acc"] == np.float32(0.5)
    wandb.log({"loss": 1.0})
    assert wandb.summary["loss"] == 1.0 and wandb.run is not None
    assert wandb.run.summary is wandb.summary
    run_dir = wandb.run.dir
    wandb.finish()
    assert records(run_dir)[-1]["summary"] == {"loss": 1.0, "acc": 0.5}


def test_numpy_scalars_and_nested_tables_are_logged(tmp_path: Path) -> None:
    wandb.init(dir=str(tmp_path))
    wandb.log({
        "f32": np.float32(0.25), "i64": np.int64(7), "flag": np.bool_(True),
        "zero_d": np.array(1.5), "train": {"loss": 0.5, "deep": {"x": 2}},
    })  # fmt: skip
    assert wandb.summary["train/loss"] == 0.5
    run_dir = wandb.run.dir
    wandb.finish()
    train = of(records(run_dir), "train")[0]
    assert train["f32"] == 0.25 and train["i64"] == 7.0 and train["flag"] == 1.0
    assert train["zero_d"] == 1.5 and train["loss"] == 0.5 and train["train/deep/x"] == 2.0


def test_the_with_block_ends_the_run(tmp_path: Path) -> None:
    with wandb.init(dir=str(tmp_path)) as run:
        wandb.log({"loss": 1.0})
        assert wandb.run is run
    assert wandb.run is None and run.finished
    assert of(records(run.dir), "end")[0]["status"] == "completed"


@pytest.mark.parametrize("how", ["keyword", "env"])
def test_disabled_mode_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if how == "env":
        monkeypatch.setenv("WANDB_MODE", "disabled")
        run = wandb.init(config={"lr": 1})
    else:
        run = wandb.init(mode="disabled", config={"lr": 1}, dir=str(tmp_path / "d"))
    wandb.log({"loss": 1.0})
    wandb.config.update({"b": 2})
    assert wandb.config.lr == 1 and run.id and wandb.run is run
    wandb.finish()
    assert wandb.run is None
    assert list(tmp_path.iterdir()) == []


def test_agent_runs_each_trial_as_its_own_run(tmp_path: Path) -> None:
    dirs: list[Path] = []

    def train() -> None:
        run = wandb.init(dir=str(tmp_path))
        wandb.log({"loss": float(len(dirs))})
        dirs.append(run.dir)

    wandb.agent("sweep", function=train, count=3)
    assert len(set(dirs)) == 3 and wandb.run is None
    assert all(of(records(d), "end") for d in dirs)
    wandb.agent(wandb.sweep({"method": "grid"}), function=train)  # count defaults to 1
    assert len(dirs) == 4


def test_tuitrain_init_accepts_wandbs_and_trackios_keywords(tmp_path: Path) -> None:
    run = tuitrain.init(tmp_path / "r", project="p", entity="e", tags=["t"], notes="n",
                        group="g", job_type="train", resume="allow", space_id="x")  # fmt: skip
    assert run.project == "p" and run.tags == ("t",) and run.job_type == "train"
    run.finish()
    assert records(tmp_path / "r")[0]["config"]["meta"]["entity"] == "e"


def test_a_step_that_goes_back_is_dropped_with_one_warning(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "r")
    run.log({"loss": 1.0}, step=16)
    run.log({"loss": 2.0}, step=3)
    run.log({"loss": 3.0}, step=2)
    run.log({"loss": 4.0}, step=16)  # the same step again: kept
    run.log({"loss": 5.0})  # step 17
    run.finish()
    recs = records(tmp_path / "r")
    assert [r["step"] for r in of(recs, "train")] == [16, 17]
    warnings = [r for r in of(recs, "event") if "less than the current step" in r["message"]]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning"
    assert of(recs, "end")[0]["dropped_rows"] == 2


@pytest.mark.slow
def test_the_wandb_module_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import sys, tuitrain.wandb as w\n"
        f"r = w.init(dir={str(tmp_path)!r})\n"
        "[w.log({'loss': 1.0, 'n': {'x': 2}}) for _ in range(10)]\n"
        "w.finish()\n"
        "print('torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TUITRAIN_RUN_DIR"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, check=True)  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr
    run_dir = next(tmp_path.iterdir())
    train = of(records(run_dir), "train")
    assert len(train) == 10 and train[-1]["host_rss_bytes"] > 0


def test_init_with_dir_takes_a_folder_no_other_init_holds(tmp_path: Path) -> None:
    """`wandb.init(dir=D)` makes D/tuitrain-<name> itself (atomically): a folder another
    process has just made, before it wrote its first record, is not taken (two scripts
    starting at once write two runs, not one run dir with two writers)."""
    (tmp_path / "tuitrain-race").mkdir()  # another process's init, a moment ahead
    run = wandb.init(name="race", dir=str(tmp_path))
    wandb.log({"loss": 1.0})
    wandb.finish()
    assert Path(run.dir) == tmp_path / "tuitrain-race-2"
    assert not any((tmp_path / "tuitrain-race").iterdir())  # left to its owner
