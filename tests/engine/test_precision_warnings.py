"""fp16 or bf16 where it is emulated runs, with a warning event that names the faster choice."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

from tuitrain.engine import precision as precision_module
from tuitrain.engine.precision import BF16Precision, FP16Precision, Precision, cpu_fp16_native
from tuitrain.engine.runner import run
from tuitrain.metrics.sinks import NullSink

ONE_STEP = ["train.device=cpu", "train.max_steps=1", "train.log_every=1", "data.batch_size=32"]


class Capture(NullSink):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(record)


def precision_events(records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == "event" and r.get("kind") == "precision"]


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64", reason="reads /proc/cpuinfo"
)
def test_native_fp16_check_matches_the_cpu_flags() -> None:
    flags = Path("/proc/cpuinfo").read_text().split()
    expected = "avx512_fp16" in flags or "amx_fp16" in flags
    assert cpu_fp16_native() is expected


def test_fp16_run_on_a_cpu_without_native_fp16_warns_at_start(
    tiny_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(precision_module, "cpu_fp16_native", lambda: False)
    sink = Capture()
    result = run(tiny_config(*ONE_STEP, "train.precision=fp16"), sink)
    assert result.status == "completed"  # a warning, not a refusal
    (warning,) = precision_events(sink.records)
    assert warning["level"] == "warning"
    assert "fp16" in warning["message"] and "emulated" in warning["message"]
    fast = "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"
    assert warning["hint"] == f"use --precision {fast} on this CPU"
    assert fast in warning["message"]
    # at run start: right after the header, before any training record
    types = [r["type"] for r in sink.records]
    assert types.index("event") == types.index("header") + 1 < types.index("train")


@pytest.mark.parametrize("native", [True, False])
def test_bf16_run_warns_only_where_bf16_is_emulated(
    tiny_config, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    monkeypatch.setattr(precision_module, "cpu_fp16_native", lambda: False)
    monkeypatch.setattr(precision_module, "bf16_supported", lambda device: native)
    sink = Capture()
    result = run(tiny_config(*ONE_STEP, "train.precision=bf16"), sink)
    assert result.status == "completed"  # emulated or not, it runs
    warnings = precision_events(sink.records)
    if native:
        assert warnings == []
    else:
        (warning,) = warnings
        assert "bf16" in warning["message"] and "emulated" in warning["message"]
        assert warning["hint"] == "use --precision fp32 on this CPU"


def test_no_warning_where_fp16_is_native_or_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.setattr(precision_module, "cpu_fp16_native", lambda: False)
    assert FP16Precision(cpu).start_warning() is not None
    assert Precision(cpu).start_warning() is None
    monkeypatch.setattr(precision_module, "bf16_supported", lambda device: True)
    assert BF16Precision(cpu).start_warning() is None  # native bf16 (emulated: see above)
    for answer in (True, None):
        monkeypatch.setattr(precision_module, "cpu_fp16_native", lambda a=answer: a)
        assert FP16Precision(cpu).start_warning() is None
