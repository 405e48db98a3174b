"""`tuitrain gate`: noise-aware throughput and metric checks, exit codes, the CI summary."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.gate import main

ROOT = Path(__file__).resolve().parents[1]


def fake_run(path: Path, rate: float, acc: float, *, noise: float = 0.08, seed: int = 0,
             points: int = 30) -> Path:  # fmt: skip
    """A run's records as the engine writes them: header, train records with samples/s that
    scatter by `noise` around `rate`, one eval at the end."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    lines = [{"type": "header", "preset": "fashion-mini", "config": {}}]
    for step in range(1, points + 1):
        lines.append({"type": "train", "step": step, "loss": 1.0,
                      "samples_per_s": rate * (1 + rng.gauss(0, noise))})  # fmt: skip
    lines.append({"type": "eval", "step": points, "val_loss": 0.4, "val_acc": acc})
    lines.append({"type": "end", "status": "completed", "reason": "", "step": points})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_two_noisy_runs_of_one_config_pass(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 960, 0.848, seed=2)  # 4% slower, 0.2 point: noise
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "| median samples/s |" in out and "bootstrap 95% interval" in out
    assert out.count("| pass |") == 2


def test_a_slower_candidate_fails_and_the_summary_is_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 700, 0.85, seed=2)  # 30% slower
    assert main([str(a), str(b)]) == 1
    assert "tuitrain gate: FAIL" in summary.read_text()
    assert main([str(a), str(b), "--max-slowdown", "50"]) == 0  # within a looser limit
    capsys.readouterr()


def test_a_worse_metric_fails_in_its_units(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85, seed=1)
    b = fake_run(tmp_path / "b", 1000, 0.838, seed=1)  # 1.2 points worse
    assert main([str(a), str(b), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    metric = result["checks"][1]
    assert metric["verdict"] == "FAIL" and metric["worse_by"] == pytest.approx(1.2)
    assert main([str(a), str(b), "--max-drop", "2"]) == 0


def test_a_missing_run_exits_2(tmp_path: Path, capsys) -> None:
    a = fake_run(tmp_path / "a", 1000, 0.85)
    assert main([str(a), str(tmp_path / "nowhere")]) == 2
    assert "no run there" in capsys.readouterr().err


@pytest.mark.slow
def test_two_real_runs_of_one_config_pass(tmp_path: Path) -> None:
    args = ["--no-ui", "--set", "data.train_samples=1024", "--set", "data.val_samples=256",
            "--set", "data.batch_size=64", "--set", "train.log_every=2", "--epochs", "3",
            "--precision", "fp32"]  # fmt: skip
    for name in ("a", "b"):
        done = subprocess.run(
            [sys.executable, "-m", "tuitrain", *args, "--run-dir", str(tmp_path / name)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "gate", str(tmp_path / "a"), str(tmp_path / "b")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "val_acc (max, last evaluation)" in done.stdout
