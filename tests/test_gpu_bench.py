"""bench/gpu.sh on first contact: a bare copy of the tree, a python3 with torch but without pip,
without tuitrain and without a `python` command, as a lent GPU machine has it. On a CPU
(`--allow-cpu`) the same plumbing runs at tiny sizes, so a break shows here before a GPU
minute is spent on it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ("pip", "tuitrain", "_tuitrain", "__editable__")  # what a bare machine lacks


def bare_python(tmp_path: Path) -> Path:
    """A venv without pip whose only packages are this interpreter's, minus pip and tuitrain
    (symlinked into one folder that a .pth line adds: its own .pth files are not processed,
    so the editable checkout stays out). Its bin/ has python3 but no `python`."""
    shelf = tmp_path / "site"
    shelf.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if entry.name.startswith(HIDDEN) or entry.suffix == ".pth":
            continue
        (shelf / entry.name).symlink_to(entry)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python3"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "shelf.pth").write_text(f"{shelf}\n")
    (venv / "bin" / "python").unlink()
    return python


def tree_copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "runs", "bench-out")
    for name in ("tuitrain", "bench", "presets"):
        shutil.copytree(ROOT / name, tree / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.fixture
def bare(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    python = bare_python(tmp_path)
    env = {
        "PATH": f"{python.parent}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "OUT": str(tmp_path / "out"),
        "TUITRAIN_NO_DOWNLOAD": "1",
    }
    probe = subprocess.run(
        [str(python), "-c", "import torch; import importlib.util as u; "
         "print(u.find_spec('tuitrain'), u.find_spec('pip'))"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert probe.stdout.split() == ["None", "None"], probe.stdout  # really bare
    return tree_copy(tmp_path), env


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_gpu_sh_measures_from_a_bare_tree_on_cpu(bare: tuple[Path, dict[str, str]]) -> None:
    tree, env = bare
    proc = subprocess.run(
        ["bash", str(tree / "bench" / "gpu.sh"), "--allow-cpu", "300"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree.parent,  # not the tree: the script finds it itself
        timeout=380,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"from {tree / 'tuitrain'}" in proc.stdout, proc.stdout
    summary = json.loads((Path(env["OUT"]) / "gpu.json").read_text())
    runs = summary["runs"]
    assert list(runs) == [
        "fashion-fp32",
        "fashion-bf16",
        "fashion-fp16",
        "fashion-bf16-eager",
        "resnet18-synth-bf16",
        "resnet18-synth-fp32",
    ]
    for label, run in runs.items():
        assert "error" not in run, (label, run)
        assert run["samples_per_s"] > 0 and run["tuitrain_from"] == str(tree / "tuitrain")
    assert runs["fashion-bf16"]["precision"] == "bf16"
    assert runs["fashion-fp16"]["precision"] == "fp16"
    assert runs["fashion-bf16-eager"]["compile"] is False
    mixed = {"fashion-bf16", "fashion-fp16", "resnet18-synth-bf16"}
    assert set(summary["speedup_vs_fp32"]) == mixed
    assert set(summary["compile_speedup"]) == {"fashion-bf16"}
    assert summary["machine"]["cpu_capability"]  # which CPU the figures came from


@pytest.mark.slow
def test_gpu_sh_fails_when_nothing_was_measured(bare: tuple[Path, dict[str, str]]) -> None:
    """A budget too small for any run: no figure, so a non-zero exit and a sentence."""
    tree, env = bare
    proc = subprocess.run(
        ["bash", str(tree / "bench" / "gpu.sh"), "--allow-cpu", "5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "no run produced a figure" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_gpu_sh_without_cuda_says_so(tmp_path: Path) -> None:
    """Without --allow-cpu on a machine without CUDA: exit 2, one line, nothing measured."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available: gpu.sh would measure here (the GPU script's job)")
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu.sh"), "60"],
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable},  # CI: no activate
        timeout=120,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("gpu.sh: no CUDA device here") and "--allow-cpu" in line, line
    assert not (tmp_path / "gpu.json").exists()
