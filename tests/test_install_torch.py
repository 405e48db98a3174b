"""scripts/install_torch.py, the README's first step: the torch build for the machine it runs
on (the CPU-only build without an NVIDIA GPU, PyPI's CUDA build with one, PyPI's own where
PyTorch's index cannot be reached), decided from what the machine has."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_torch.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_torch", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def choose(monkeypatch: pytest.MonkeyPatch, *, torch: bool, gpu: bool, online: bool):
    mod = script()
    monkeypatch.setattr(mod.sys, "platform", "linux")
    monkeypatch.setattr(mod.importlib.util, "find_spec", lambda name: object() if torch else None)
    monkeypatch.setattr(mod, "has_nvidia_gpu", lambda: gpu)
    monkeypatch.setattr(mod, "reachable", lambda host, timeout_s=5.0: online)
    return mod.pip_command()


def test_no_gpu_takes_the_cpu_only_build(monkeypatch: pytest.MonkeyPatch) -> None:
    command, why = choose(monkeypatch, torch=False, gpu=False, online=True)
    assert command is not None and command[-2:] == ["--index-url", script().CPU_INDEX]
    assert "CPU-only" in why


def test_a_gpu_takes_pypis_cuda_build(monkeypatch: pytest.MonkeyPatch) -> None:
    command, why = choose(monkeypatch, torch=False, gpu=True, online=True)
    assert command is not None and "--index-url" not in command and "CUDA" in why


def test_an_unreachable_cpu_index_falls_back_to_pypi_and_says_so(monkeypatch) -> None:
    command, why = choose(monkeypatch, torch=False, gpu=False, online=False)
    assert command is not None and "--index-url" not in command
    assert "cannot be reached" in why and "5.5 GB" in why


def test_an_installed_torch_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    command, why = choose(monkeypatch, torch=True, gpu=False, online=True)
    assert command is None and "already installed" in why


def test_the_script_runs_and_says_its_choice_in_one_line() -> None:
    """In this test environment torch is installed: the script says so and installs nothing."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "install_torch: torch is already installed here: keeping it."
    ]
