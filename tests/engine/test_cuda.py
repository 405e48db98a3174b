"""The GPU path, on a GPU: no host sync on steps that do not log, telemetry filled, eval without
a second compile. Marked `gpu` and skipped without CUDA (run them on a lent GPU machine:
`python3 -m pytest -q -m gpu`)."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tuitrain.core.config import load_preset
from tuitrain.engine import run
from tuitrain.engine.trainer import Trainer
from tuitrain.metrics.sinks import Sink

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GPU_TINY = [
    "data.name=fashion_mini",
    "data.train_samples=2048",
    "data.val_samples=512",
    "train.log_every=4",
    'train.device="cuda"',
]


class Records(Sink):
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Any) -> None:
        self.records.append(dict(record))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == kind]


def sync_checked(monkeypatch: pytest.MonkeyPatch, checked: list[int]) -> None:
    """Every step that neither logs nor compiles runs under sync debug mode "error": a host
    sync there (an .item(), a scaler read, a data-dependent shape) raises and fails the run."""
    original = Trainer.one_step

    def one_step(self: Trainer, batches: Any) -> None:
        step, every, total = self.step, self.cfg.train.log_every, self.parts.total_steps
        logs = (step + 1) % every == 0 or step + 1 == total
        first = step == self.start_step
        if logs or first:
            return original(self, batches)
        torch.cuda.set_sync_debug_mode("error")
        try:
            original(self, batches)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        checked.append(step)

    monkeypatch.setattr(Trainer, "one_step", one_step)


@pytest.mark.parametrize("compile_mode", ["off", "on"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_no_host_sync_on_steps_that_do_not_log(
    monkeypatch: pytest.MonkeyPatch, precision: str, compile_mode: str
) -> None:
    checked: list[int] = []
    sync_checked(monkeypatch, checked)
    cfg = load_preset(
        "fashion-mini",
        [
            *GPU_TINY,
            f'train.precision="{precision}"',
            f'train.compile="{compile_mode}"',
            "train.max_steps=16",
            "train.eval_every_epoch=false",
        ],
    )
    sink = Records()
    result = run(cfg, sink)
    assert result.status == "completed", result.reason
    assert len(checked) >= 8, checked  # most steps ran under "error"


def test_the_fashion_recipe_needs_no_host_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random crops, flips (drawn per epoch, copied once) and label smoothing: no sync."""
    checked: list[int] = []
    sync_checked(monkeypatch, checked)
    cfg = load_preset(
        "fashion-bf16",
        [
            *GPU_TINY,
            'train.compile="off"',
            "train.max_steps=16",  # two epochs: the second epoch's draws are made mid-run
            "train.eval_every_epoch=false",
        ],
    )
    assert cfg.data.crop_padding and cfg.data.hflip and cfg.train.label_smoothing
    result = run(cfg, Records())
    assert result.status == "completed", result.reason
    assert len(checked) >= 8 and 8 in checked, checked


def test_telemetry_is_filled_on_cuda() -> None:
    cfg = load_preset("fashion-mini", [*GPU_TINY, "train.max_steps=8", 'train.compile="off"'])
    sink = Records()
    assert run(cfg, sink).status == "completed"
    header = sink.of("header")[0]
    assert header["device"].startswith("cuda") and header["device_memory_bytes"] > 0
    assert header["tf32"] is (torch.cuda.get_device_capability() >= (8, 0))
    last = sink.of("train")[-1]
    for field in ("mem_alloc_bytes", "mem_reserved_bytes", "mem_peak_bytes", "gpu_mem_used_bytes"):
        assert last[field] is not None and last[field] > 0, field
    assert last["gpu_mem_used_bytes"] >= last["mem_reserved_bytes"]  # device-wide >= ours
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return
    assert last["gpu_util_pct"] is not None


def test_nvml_finds_the_torch_device_by_uuid() -> None:
    pynvml = pytest.importorskip("pynvml")
    from tuitrain.engine.telemetry import Telemetry, nvml_uuid

    device = torch.device("cuda", torch.cuda.device_count() - 1)
    telemetry = Telemetry(device)
    assert telemetry.nvml_error is None, telemetry.nvml_error
    uuid = pynvml.nvmlDeviceGetUUID(telemetry._nvml_handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    assert uuid == nvml_uuid(device)


def test_eval_does_not_compile_a_second_graph() -> None:
    from torch._dynamo.utils import counters

    graphs: dict[str, int] = {}

    class Counting(Records):
        def write(self, record: Any) -> None:
            if record.get("kind") == "compile_done" or record["type"] == "eval":
                graphs[record.get("kind") or "eval"] = counters["stats"]["unique_graphs"]
            super().write(record)

    cfg = load_preset("fashion-mini", [*GPU_TINY, "train.epochs=2", 'train.compile="on"'])
    sink = Counting()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert run(cfg, sink).status == "completed"
    assert len(sink.of("eval")) == 2
    assert graphs["eval"] == graphs["compile_done"] > 0, graphs


def test_memory_snapshot_steps_writes_a_pickle_for_the_viewer(tmp_path: Path) -> None:
    """--memory-snapshot-steps 2: steps 1-2 recorded, memory-snapshot-step2.pickle in the run
    dir, the dict PyTorch's memory viewer reads (segments, and the recorded history)."""
    overrides = [*GPU_TINY, "train.max_steps=4", "train.memory_snapshot_steps=2"]
    cfg = load_preset("fashion-mini", [*overrides, 'train.compile="off"'])
    sink = Records()
    assert run(cfg, sink, run_dir=tmp_path).status == "completed"
    path = tmp_path / "memory-snapshot-step2.pickle"
    snapshot = pickle.loads(path.read_bytes())
    assert isinstance(snapshot, dict) and snapshot["segments"]
    assert any(snapshot["device_traces"])  # alloc/free events of the recorded steps
    (event,) = [e for e in sink.of("event") if e.get("kind") == "memory_snapshot"]
    assert event["path"] == str(path) and event.get("level") != "warning"
