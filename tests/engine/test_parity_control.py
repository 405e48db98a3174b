"""`tuitrain parity --control`: a third run, fp32 with seed + 1, and whether mixed precision
moves the metric more than the seed does; in the JSON, the report and the dashboard (C)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.engine.parity import parity

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_control_on_classification(tiny_config) -> None:
    result = parity(tiny_config("train.precision=fp32"), 1, "bf16", early_steps=0,
                    with_control=True)  # fmt: skip
    c = result.control
    assert c is not None and c["seed"] == 1 and c["metric"] == "val_acc"
    assert c["gap"] == pytest.approx(100 * (result.final("fp32_acc") - c["value"]))
    low, high = c["gap_ci95"]
    assert low <= c["gap"] <= high  # paired over the same 256 images, in points
    larger = abs(result.gap_points) > abs(c["gap"])
    assert c["mixed_beyond_seed"] is (None if larger else False) or c["mixed_beyond_seed"]
    assert ("no more than" in c["verdict"]) == (not larger)
    assert ("more than the seed (" in c["verdict"]) == (c["mixed_beyond_seed"] is True)
    assert result.to_json()["control"] == c
    assert "fp32 with seed 1" in (result.control_line() or "")


@pytest.mark.slow
def test_control_on_a_task_and_from_the_command_line(tmp_path: Path) -> None:
    preset = str(ROOT / "tests" / "tasks" / "regression.toml")
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "parity", "--preset", preset, "--mixed", "bf16",
         "--epochs", "1", "--early-steps", "0", "--control", "on", "--json",
         "--run-dir", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    data = json.loads(done.stdout)
    c = data["control"]
    assert c["metric"] == "val_mae" and c["unit"] == "the metric's units"
    assert c["gap_ci95"][0] <= c["gap"] <= c["gap_ci95"][1]
    # another seed starts from other weights: it moves the metric far more than bf16 does
    assert c["mixed_beyond_seed"] is False and "within run-to-run noise" in c["verdict"]


@pytest.mark.slow
def test_auto_adds_the_control_only_after_a_fail() -> None:
    from tuitrain.core.config import load_preset

    preset = str(ROOT / "tests" / "tasks" / "regression.toml")
    passed = parity(load_preset(preset, ["train.epochs=1"]), 1, "bf16", early_steps=0)
    assert passed.verdict == "PASS" and passed.control is None  # auto: no third run
    strict = load_preset(preset, ["train.epochs=1", "task.tolerance=1e-12"])
    failed = parity(strict, 1, "bf16", early_steps=0)
    assert failed.verdict == "FAIL" and failed.control is not None
    assert failed.control["why"] == "auto: the verdict is FAIL"
    off = parity(strict, 1, "bf16", early_steps=0, with_control="off")
    assert off.verdict == "FAIL" and off.control is None
