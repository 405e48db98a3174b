"""A checkpoint is input: a refused resume touches nothing, and wrong contents are refused in
one sentence (issue 19, points 6, 7 and 10)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tuitrain.core.config import load_preset
from tuitrain.engine.checkpoint import CheckpointError, find_latest, load_checkpoint
from tuitrain.engine.state import SOURCE_KEY, check_resumable

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "data.train_samples=512", "--set", "data.val_samples=256", "--log-every", "2"]


def tuitrain(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    env = {"PYTHONPATH": str(ROOT), "TUITRAIN_NO_DOWNLOAD": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and modification time."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed two-step run of fashion-mini with its checkpoint."""
    run_dir = tmp_path_factory.mktemp("untrusted") / "run"
    proc = tuitrain(*TINY, "--max-steps", "2", "--run-dir", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return run_dir


def one_line_refusal(proc: Any, words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert words in proc.stderr


@pytest.mark.slow
def test_a_refused_resume_touches_nothing(saved_run: Path) -> None:
    """The model check used to run after the header: a resume with another model rewrote
    config.toml and appended a header, a failure and an end record to the completed run."""
    before = snapshot(saved_run)
    ckpt = find_latest(saved_run)
    proc = tuitrain("--resume", str(ckpt), "--max-steps", "4", "--set", "model.name=mlp")
    one_line_refusal(proc, "does not fit this model")
    assert snapshot(saved_run) == before


@pytest.mark.slow
def test_altered_contents_are_refused_before_anything_is_written(saved_run: Path) -> None:
    state = load_checkpoint(find_latest(saved_run))
    state["optimizer"] = {"state": {}, "param_groups": []}  # well-formed, wrong
    altered = saved_run / "checkpoints" / "ckpt-step00000099.pt"
    torch.save(state, altered)
    try:
        before = snapshot(saved_run)
        proc = tuitrain("--resume", str(altered), "--max-steps", "200")
        one_line_refusal(proc, "its optimizer state does not load")
        assert snapshot(saved_run) == before
    finally:
        altered.unlink()


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state[key] = value

    return change


def _model_dtype(state: dict[str, Any]) -> None:
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name][..., :1]  # the right name, a wrong shape


def _rng_short(state: dict[str, Any]) -> None:
    state["rng"]["torch"] = state["rng"]["torch"][:10]


def _model_as_lists(state: dict[str, Any]) -> None:
    state["model"] = {k: v.tolist() for k, v in state["model"].items()}


def _weights_as(dtype: torch.dtype) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        name = next(iter(state["model"]))
        state["model"][name] = state["model"][name].to(dtype)

    return change


def _nan_weight(state: dict[str, Any]) -> None:
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))


def _group(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["optimizer"]["param_groups"][0][key] = value

    return change


def _exp_avg_shape(state: dict[str, Any]) -> None:
    first = next(iter(state["optimizer"]["state"].values()))
    first["exp_avg"] = torch.zeros(3)


def _scheduler(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["scheduler"][key] = value

    return change


def _meter(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["meter"][key] = value

    return change


ALTERATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "weights as lists": (_model_as_lists, "its weights are no tensors"),
    "int64 weights": (_weights_as(torch.int64), "is torch.int64 there and torch.float32 here"),
    "NaN weights": (_nan_weight, "holds NaN or infinite values"),
    "lr as text": (_group("lr", "x"), "its optimizer state does not load"),
    "betas of text": (_group("betas", ("a", 0.9)), "its optimizer state does not load"),
    "NaN lr": (_group("lr", float("nan")), "its optimizer state does not load"),
    "exp_avg of another shape": (_exp_avg_shape, "its optimizer state does not load"),
    "base_lrs as text": (_scheduler("base_lrs", ["x"]), "its scheduler state does not load"),
    "base_lrs empty": (_scheduler("base_lrs", []), "its scheduler state does not load"),
    "loss window of 3": (_meter("loss_sum", torch.zeros(3)), "its loss window state"),
    "skipped as float": (_meter("skipped", torch.tensor(0.5)), "its loss window state"),
    "micro batches 2**70": (_meter("micro_batches", 2**70), "its loss window state"),
    "preset as a list": (_set("preset", ["a"]), "names no preset (['a'])"),
    "world size as text": (_set("world_size", "x"), "has world_size = 'x', not a count"),
    "world size 0": (_set("world_size", 0), "has world_size = 0, not a count"),
    "val_acc as text": (_set("val_acc", "x"), "has val_acc = 'x', not a number"),
    "epoch_step past the epoch": (_set("epoch_step", 1000), "is at step 1000 of an epoch of"),
    "negative step": (_set("step", -5), "has step = -5, not a count"),
    "step as text": (_set("step", "12"), "has step = '12', not a count"),
    "huge epoch": (_set("epoch", 2**70), "has epoch = "),
    "bool samples": (_set("samples", True), "has samples = True"),
    "empty optimizer": (_set("optimizer", {}), "optimizer state"),
    "scheduler list": (_set("scheduler", [1, 2]), "scheduler state"),
    "scaler without scale": (_set("scaler", {"growth": 2.0}), "scaler state"),
    "empty rng": (_set("rng", {}), "RNG state"),
    "short torch rng": (_rng_short, "RNG state"),
    "no loss window": (_set("meter", {}), "loss window state"),
    "a weight of another shape": (_model_dtype, "does not fit this model"),
}


@pytest.mark.parametrize("name", list(ALTERATIONS))
def test_wrong_contents_are_one_sentence(saved_run: Path, name: str) -> None:
    """Each alteration loads with weights_only=True (plain data and tensors), so only the
    checks before the run can stop it; it used to fail mid-restore, 'looks like a bug'."""
    path = find_latest(saved_run)
    state = load_checkpoint(path)
    state[SOURCE_KEY] = str(path)
    change, words = ALTERATIONS[name]
    change(state)
    cfg = load_preset("fashion-mini", ["data.train_samples=512", "data.val_samples=256"])
    with pytest.raises(CheckpointError) as caught:
        check_resumable(cfg, state)
    message = str(caught.value)
    assert words in message and str(path) in message and "\n" not in message


def test_the_untouched_checkpoint_passes_the_check(saved_run: Path) -> None:
    state = load_checkpoint(find_latest(saved_run))
    cfg = load_preset("fashion-mini", ["data.train_samples=512", "data.val_samples=256"])
    rng_before = torch.get_rng_state()
    before = copy.deepcopy(state)
    check_resumable(cfg, state)  # does not raise
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is left alone
    # the state itself is untouched: the trial optimizer step once moved the Adam moments of
    # the dict the run then resumed from (load_state_dict keeps tensors it need not cast)
    flat_before, flat_after = flatten(before), flatten(state)
    assert flat_before.keys() == flat_after.keys()
    for key, value in flat_before.items():
        same = torch.equal(value, flat_after[key]) if isinstance(value, torch.Tensor) else None
        assert same is not False, key
        assert same or value == flat_after[key], key


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested state as {'optimizer.state.0.exp_avg': tensor, ...}."""
    if isinstance(value, dict):
        return {
            k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}.").items()
        }
    if isinstance(value, (list, tuple)):
        return {
            k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}.").items()
        }
    return {prefix: value}


FACTORY = """
from pathlib import Path

import torch.nn as nn


def make_model(num_classes):
    Path("{marker}").write_text("ran")  # what a planted factory could do: anything
    return nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))
"""


@pytest.fixture(scope="module")
def factory_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A run whose model comes from a user factory module `planted` in its own folder; its
    checkpoint's config names 'planted:make_model'. (code folder, run dir, marker file)"""
    base = tmp_path_factory.mktemp("factory")
    code, marker = base / "code", base / "marker"
    code.mkdir()
    (code / "planted.py").write_text(FACTORY.format(marker=marker))
    run_dir = base / "run"
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{code}"}
    proc = tuitrain(
        *TINY, "--max-steps", "2", "--run-dir", str(run_dir),
        "--set", "model.name='planted:make_model'", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ran"
    marker.unlink()
    return code, run_dir, marker


@pytest.mark.slow
def test_a_checkpoint_cannot_make_resume_import_code(factory_run: tuple[Path, Path, Path]) -> None:
    """The factory a checkpoint's config names is imported and called on resume; it runs only
    when the user names it on the command line (or in the preset given with --preset)."""
    code, run_dir, marker = factory_run
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{code}"}
    ckpt = str(find_latest(run_dir))
    before = snapshot(run_dir)
    refused = tuitrain("--resume", ckpt, "--max-steps", "4", env=env)
    one_line_refusal(refused, "names model.name = 'planted:make_model', which resuming would")
    assert "--set model.name='planted:make_model'" in refused.stderr
    assert not marker.exists()  # the factory was not imported, let alone called
    assert snapshot(run_dir) == before
    named = tuitrain(
        "--resume", ckpt, "--max-steps", "4", "--set", "model.name='planted:make_model'", env=env
    )
    assert named.returncode == 0, named.stderr
    assert marker.read_text() == "ran"
    marker.unlink()


@pytest.mark.slow
def test_the_current_directory_is_not_on_the_import_path(
    factory_run: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """`python -m tuitrain` (and every --nproc rank) used to import a factory module lying in
    the directory the command was started from; now only from PYTHONPATH or installed."""
    code, _, marker = factory_run
    args = [*TINY, "--max-steps", "1", "--set", "model.name='planted:make_model'"]
    here = tuitrain(*args, "--run-dir", str(tmp_path / "a"), cwd=code)
    one_line_refusal(here, "cannot import planted")
    assert not marker.exists()
    asked = tuitrain(
        *args, "--run-dir", str(tmp_path / "b"), cwd=code, env={"PYTHONPATH": f"{ROOT}:."}
    )
    assert asked.returncode == 0, asked.stderr  # PYTHONPATH=. is the user's own choice
    assert marker.read_text() == "ran"
    marker.unlink()


def test_a_checkpoint_cannot_name_an_on_alert_command(saved_run: Path, tmp_path: Path) -> None:
    """alerts.on_alert is a shell command: one a checkpoint's config names runs only when
    the user names it again."""
    import argparse

    from tuitrain.host.launch import resume_config

    state = load_checkpoint(find_latest(saved_run))
    state["config"]["alerts"] = {"on_alert": f"touch {tmp_path / 'ran'}"}
    planted = tmp_path / "run" / "checkpoints" / "ckpt-step00000002.pt"
    planted.parent.mkdir(parents=True)
    torch.save(state, planted)
    args = argparse.Namespace(resume=str(planted), run_dir=None, preset=None)
    with pytest.raises(CheckpointError, match="names alerts.on_alert = 'touch .*which resuming"):
        resume_config(args, [])
    command = f"alerts.on_alert='touch {tmp_path / 'ran'}'"
    cfg, _ = resume_config(args, [command])  # named by the user: accepted
    assert cfg.alerts.on_alert == f"touch {tmp_path / 'ran'}"
