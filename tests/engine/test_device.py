"""Device facts that decide a GPU run before it starts, tested on any machine by standing in
for what CUDA would answer: ranks per GPU, an unusable GPU, TF32 in the precision shown, and
the NVML device found by UUID."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tuitrain.core.errors import UserError
from tuitrain.engine import device as device_mod
from tuitrain.engine import telemetry as telemetry_mod
from tuitrain.engine.device import check_nproc, resolve_device, unusable_gpu
from tuitrain.metrics.format import format_header_line, precision_label
from tuitrain.metrics.sinks import NullSink


class Keep(NullSink):
    """Keeps every record the engine writes, in order."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records

    def write(self, record: Any) -> None:
        self.records.append(dict(record))


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")


def test_more_ranks_than_gpus_is_refused(two_gpus: None) -> None:
    check_nproc(2, "auto")
    check_nproc(2, "cuda")
    check_nproc(8, "cpu")  # gloo ranks share the CPU
    with pytest.raises(UserError) as err:
        check_nproc(3, "auto")
    message = str(err.value)
    assert "3 ranks" in message and "2 are visible (CUDA_VISIBLE_DEVICES=2,3)" in message
    assert "--nproc 2" in message
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(UserError, match="2 are visible"):
        resolve_device("auto", local_rank=2)  # torchrun by hand, 3 local ranks


@pytest.mark.slow
def test_nproc_beyond_the_gpus_exits_2_before_any_rank_starts(tmp_path: Path) -> None:
    """The real command line, on a machine whose torch sees no GPU: --device cuda names why."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: the refusal there is covered by the monkeypatched test")
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", "--nproc", "2", "--device", "cuda"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "CUDA is not available" in proc.stderr and "Traceback" not in proc.stderr


def test_unusable_gpu_names_the_cause(tmp_path: Path) -> None:
    driver = tmp_path / "version"
    driver.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Thu Oct 28 2021\n"
    )
    assert unusable_gpu(cuda_available=True, present="/dev/nvidia0") is None
    assert unusable_gpu(cuda_available=False, present=None) is None or (
        device_mod.nvidia_gpu_present() is not None  # this machine has one itself
    )
    old_driver = unusable_gpu(
        cuda_available=False, present="/dev/nvidia0", torch_cuda="13.0", driver_file=driver
    )
    assert old_driver is not None
    cause, hint = old_driver
    assert "/dev/nvidia0" in cause and "CUDA 13.0" in cause and "driver 470.82.01" in cause
    assert "update the NVIDIA driver" in hint
    cpu_only = unusable_gpu(cuda_available=False, present="nvidia-smi", torch_cuda="")
    assert cpu_only is not None and "CPU-only build" in cpu_only[0]
    assert "CUDA build of torch" in cpu_only[1]


def test_auto_run_beside_an_unusable_gpu_warns(monkeypatch: pytest.MonkeyPatch, tiny_config):
    """--device auto falls back to the CPU, and says why, in one warning event."""
    from tuitrain.engine import runner as runner_mod
    from tuitrain.engine.runner import run

    monkeypatch.setattr(
        runner_mod,
        "unused_gpu_warning",
        lambda: ("an NVIDIA GPU is present (/dev/nvidia0) but ...: training runs on the CPU", "x"),
    )
    records: list[dict] = []

    result = run(tiny_config("train.max_steps=2", 'train.device="auto"'), Keep(records))
    assert result.status == "completed"
    warned = [r for r in records if r.get("kind") == "device"]
    assert len(warned) == 1 and warned[0]["level"] == "warning"
    assert "training runs on the CPU" in warned[0]["message"]
    records.clear()
    run(tiny_config("train.max_steps=2", 'train.device="cpu"'), Keep(records))
    assert not [r for r in records if r.get("kind") == "device"]  # asked for the CPU: no noise


def test_precision_label_says_tf32() -> None:
    header = {"precision": "fp32", "tf32": True, "device": "cuda:0", "device_name": "NVIDIA H200"}
    assert precision_label(header) == "fp32 (TF32)"
    assert "precision fp32 (TF32)" in format_header_line(header)
    assert precision_label({**header, "precision": "bf16"}) == "bf16"
    assert precision_label({**header, "tf32": False}) == "fp32"
    assert precision_label({"precision": "fp32"}) == "fp32"  # older files: no tf32 field


def test_header_records_tf32_false_on_cpu(tiny_config) -> None:
    from tuitrain.engine.runner import run

    records: list[dict] = []

    run(tiny_config("train.max_steps=1", 'train.device="cpu"'), Keep(records))
    assert records[0]["type"] == "header" and records[0]["tf32"] is False


@pytest.mark.parametrize(
    ("uuid", "expected"),
    [
        ("8d7c1f1e-0b0a-4c3e-9a51-5e0fd1d2b3c4", "GPU-8d7c1f1e-0b0a-4c3e-9a51-5e0fd1d2b3c4"),
        ("MIG-1234", "MIG-1234"),
        ("", None),
    ],
)
def test_nvml_uuid_spelling(monkeypatch: pytest.MonkeyPatch, uuid: str, expected: str | None):
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: SimpleNamespace(uuid=uuid)
    )
    assert telemetry_mod.nvml_uuid(torch.device("cuda", 1)) == expected


def test_nvml_is_asked_by_uuid_not_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under CUDA_VISIBLE_DEVICES=3, torch's cuda:0 is NVML's index 3: the UUID finds it."""
    asked: list[tuple[str, object]] = []
    fake = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda u: asked.append(("uuid", u)) or "handle",
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(("index", i)) or "wrong",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr(telemetry_mod, "nvml_uuid", lambda device: "GPU-abc")
    telemetry = telemetry_mod.Telemetry(torch.device("cuda", 0))
    assert asked == [("uuid", "GPU-abc")] and telemetry._nvml_handle == "handle"
    asked.clear()
    monkeypatch.setattr(telemetry_mod, "nvml_uuid", lambda device: None)
    telemetry = telemetry_mod.Telemetry(torch.device("cuda", 0))
    assert asked == [] and telemetry._nvml is None  # no UUID: null, never another GPU's figures
    assert telemetry.nvml_error and "CUDA_VISIBLE_DEVICES" in telemetry.nvml_error
