"""bench/preset_accuracy.py and bench/gpu_accuracy.sh (issue #18's figures) before a GPU minute
is spent on them: the real command line per run from a bare copy of the tree, a summary that a
time budget's cut does not lose, and the script's refusals when it cannot measure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_gpu_bench import bare  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[1]


PRESETS = {  # --allow-cpu: one CNN preset (the GPU run's other two take the same path)
    "fashion-fp32": "fp32",
    "fashion-resnet18-bf16": "fp32",  # --allow-cpu runs the ResNet in fp32: 1 step, 4 images
}


@pytest.mark.slow
def test_gpu_accuracy_plumbing_on_cpu_and_a_cut_run_keeps_its_epochs(
    bare: tuple[Path, dict[str, str]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    tree, env = bare
    env = {**env, "TMPDIR": str(tmp_path)}
    out = Path(env["OUT"])
    proc = subprocess.run(
        ["bash", str(tree / "bench" / "gpu_accuracy.sh"), "--allow-cpu", "300"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    presets = json.loads((out / "gpu_accuracy.json").read_text())["presets"]
    assert set(presets) == set(PRESETS)
    for name, precision in PRESETS.items():
        (only,) = presets[name]["runs"]
        assert (only["seed"], only["complete"], only["precision"]) == (0, True, precision), name
        assert presets[name]["mean_pct"] == round(only["final_acc"] * 100, 2)
        assert (out / "runs" / f"{name}-seed0.jsonl").is_file()
    assert not list(tmp_path.glob("tuitrain-gpu-acc.*")), "the run folders are removed"

    # a run that a budget stopped: its header and first eval, then a half-written line
    runs = tmp_path / "cut"
    for seed in (0, 1):
        (runs / f"fashion-fp32-seed{seed}").mkdir(parents=True)
    lines = (out / "runs" / "fashion-fp32-seed0.jsonl").read_text().splitlines()
    (runs / "fashion-fp32-seed0" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    header = json.loads(lines[0])
    header["config"]["train"]["seed"] = 1
    first_eval = next(line for line in lines if json.loads(line)["type"] == "eval")
    (runs / "fashion-fp32-seed1" / "metrics.jsonl").write_text(
        "\n".join([json.dumps(header), first_eval, '{"type": "tra']) + "\n"
    )
    python = env["PATH"].split(":")[0] + "/python3"
    proc = subprocess.run(
        [python, "bench/preset_accuracy.py", "--summarise", str(runs)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)["presets"]["fashion-fp32"]
    assert [(r["seed"], r["complete"], r["epochs_done"]) for r in summary["runs"]] == [
        (0, True, 1),
        (1, False, 1),
    ]
    assert summary["seeds_complete"] == [0]  # the mean is over finished runs only
    assert summary["runs"][1]["final_acc"] == json.loads(first_eval)["val_acc"]


def run_script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_accuracy.sh"), *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_gpu_accuracy_refuses_without_the_data(tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "TUITRAIN_DATA": str(empty)}
    env["OUT"] = str(tmp_path / "out")
    proc = run_script(env)
    assert proc.returncode == 2
    assert f"Fashion-MNIST is not in {empty}; copy its four IDX files there" in proc.stderr
    assert not (tmp_path / "out" / "gpu_accuracy.json").exists()


def test_gpu_accuracy_refuses_a_bad_budget(tmp_path: Path) -> None:
    proc = run_script({"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, "7m")
    assert proc.returncode == 2
    assert "budget_s must be a whole number of seconds, not '7m'" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
def test_gpu_accuracy_refuses_without_a_gpu(tmp_path: Path) -> None:
    data = tmp_path / "fashion"
    data.mkdir()
    (data / "train-images-idx3-ubyte.gz").write_bytes(b"")  # only looked for, not read
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "TUITRAIN_DATA": str(data)}
    env["OUT"] = str(tmp_path / "out")
    proc = run_script(env)
    assert proc.returncode == 2
    assert "no CUDA GPU here; these runs take hours on a CPU" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_gpu_accuracy_is_shipped_executable_by_bash() -> None:
    assert shutil.which("bash")
    proc = subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_accuracy.sh")], check=False)
    assert proc.returncode == 0
