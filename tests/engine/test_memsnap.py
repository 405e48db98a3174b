"""Memory snapshots (m, --memory-snapshot-steps): on a CPU one warning and no file; the dump,
the planted-link refusal and the out-of-memory path with the CUDA allocator calls stubbed (the
real ones: tests/engine/test_cuda.py, GPU-marked)."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tuitrain.core.control import MEMORY_ON_CPU
from tuitrain.engine import Control, run
from tuitrain.engine.memsnap import MAX_ENTRIES, MemorySnapshot
from tuitrain.engine.runner import fail
from tuitrain.metrics.sinks import Sink
from tuitrain.rundir.layout import RunDir

CUDA = torch.device("cuda", 0)  # a device object only: no CUDA call reaches torch here


class Records(Sink):
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Any) -> None:
        self.records.append(dict(record))

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == "event" and r.get("kind") == kind]


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """Stub torch's allocator history calls; returns the _record_memory_history calls."""
    calls: list[tuple[Any, dict[str, Any]]] = []

    def record(enabled: Any = "all", **kwargs: Any) -> None:
        calls.append((enabled, kwargs))

    def snapshot(*args: Any, **kwargs: Any) -> dict[str, Any]:
        history = [[{"action": "alloc", "size": 512}]] if calls and calls[-1][0] else [[]]
        return {"segments": [{"total_size": 2**20}], "device_traces": history}

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", snapshot)
    return calls


def test_memory_snapshot_steps_on_cpu_is_one_warning(tiny_config, tmp_path: Path) -> None:
    """--memory-snapshot-steps 2 on a CPU, and m pressed (a control request) mid-run: a
    warning each saying why nothing is recorded, no file, and the run completes."""
    control = Control()
    control.request_memory_snapshot(5)  # m, read at the first step boundary
    sink = Records()
    cfg = tiny_config("train.max_steps=3", "train.memory_snapshot_steps=2", 'train.device="cpu"')
    result = run(cfg, sink, control, run_dir=tmp_path)
    assert result.status == "completed"
    warned = sink.events("memory_snapshot")
    assert len(warned) == 2
    assert all(e["level"] == "warning" and e["message"] == MEMORY_ON_CPU for e in warned)
    assert not list(tmp_path.glob("memory-snapshot*"))
    assert not [r for r in sink.records if r.get("level") == "error"]


def test_snapshot_after_n_steps_then_recording_stops(allocator, tmp_path: Path) -> None:
    sink = Records()
    snap = MemorySnapshot(CUDA, RunDir(tmp_path))
    snap.request(2, sink)
    snap.maybe_start(5)  # the boundary before step 6
    assert allocator == [("all", {"max_entries": MAX_ENTRIES})]
    snap.after_step(6, sink)
    assert not list(tmp_path.glob("*.pickle")) and not sink.records
    snap.maybe_start(6)  # already recording: no second start
    snap.after_step(7, sink)
    path = tmp_path / "memory-snapshot-step7.pickle"
    data = pickle.loads(path.read_bytes())
    assert data["segments"] and data["device_traces"] == [[{"action": "alloc", "size": 512}]]
    assert allocator[-1] == (None, {}) and len(allocator) == 2  # stopped, once
    (event,) = sink.events("memory_snapshot")
    assert event["path"] == str(path) and "steps 6-7" in event["message"]
    assert "https://pytorch.org/memory_viz" in event["message"]
    assert not list(tmp_path.glob(".*tmp-*"))


def test_a_planted_link_is_replaced_not_written_through(allocator, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "memory-snapshot-step1.pickle").symlink_to(victim)
    snap = MemorySnapshot(CUDA, RunDir(tmp_path))
    sink = Records()
    snap.request(1, sink)
    snap.maybe_start(0)
    snap.after_step(1, sink)
    assert victim.read_text() == "keep me"
    path = tmp_path / "memory-snapshot-step1.pickle"
    assert not path.is_symlink() and "segments" in pickle.loads(path.read_bytes())


def test_the_run_end_dumps_what_a_cut_short_recording_has(allocator, tmp_path: Path) -> None:
    sink = Records()
    snap = MemorySnapshot(CUDA, RunDir(tmp_path))
    snap.request(10, sink)
    snap.maybe_start(0)
    snap.after_step(1, sink)
    snap.after_step(2, sink)
    snap.close(2, sink)
    (event,) = sink.events("memory_snapshot")
    assert "after 2 of the 10 steps" in event["message"]
    assert (tmp_path / "memory-snapshot-step2.pickle").exists()
    assert allocator[-1] == (None, {})


def oom_trainer(snap: MemorySnapshot) -> Any:
    """What fail() reads of a trainer, and no more."""
    optimizer = SimpleNamespace(zero_grad=lambda set_to_none: None)
    return SimpleNamespace(
        memory=snap,
        step=3,
        batch_size=64,
        samples=0,
        state_sound=False,
        fitting=True,
        start_step=0,
        parts=SimpleNamespace(optimizer=optimizer),
    )


@pytest.mark.parametrize("recording", [False, True])
def test_cuda_oom_writes_a_snapshot_before_the_end(
    allocator, tmp_path: Path, recording: bool
) -> None:
    """With a recording on: its history up to the failure; without: the allocator's state
    (no history), and the event says which."""
    sink = Records()
    snap = MemorySnapshot(CUDA, RunDir(tmp_path))
    if recording:
        snap.request(50, sink)
        snap.maybe_start(1)
    result = fail(
        torch.OutOfMemoryError("CUDA out of memory"), sink, Control(), oom_trainer(snap), 0.0
    )
    assert result.status == "failed"
    path = tmp_path / "memory-snapshot-step4.pickle"  # the step that ran out
    data = pickle.loads(path.read_bytes())
    assert bool(data["device_traces"][0]) is recording
    (event,) = sink.events("memory_snapshot")
    assert event["history"] is recording and event["path"] == str(path)
    assert ("no history" in event["message"]) is not recording
    kinds = [r["type"] for r in sink.records]
    assert kinds.index("end") > sink.records.index(event)
    started = [("all", {"max_entries": MAX_ENTRIES}), (None, {})]  # and stopped
    assert not snap.recording and allocator == (started if recording else [])


def test_other_failures_stop_a_recording_without_a_snapshot(allocator, tmp_path: Path) -> None:
    sink = Records()
    snap = MemorySnapshot(CUDA, RunDir(tmp_path))
    snap.request(50, sink)
    snap.maybe_start(1)
    fail(ValueError("boom"), sink, Control(), oom_trainer(snap), time.perf_counter())
    assert not snap.recording and allocator[-1] == (None, {})
    assert not list(tmp_path.glob("memory-snapshot*")) and not sink.events("memory_snapshot")
