"""CUDA allocator snapshots for PyTorch's memory viewer (https://pytorch.org/memory_viz).

`m` or `--memory-snapshot-steps N` records the allocator's history (every alloc and free with
its stack) for the next N steps and writes `memory-snapshot-stepS.pickle` into the run dir (S:
the last step recorded); a CUDA out-of-memory error writes one before the run ends. Rank 0
only under DDP (recording is local to a process: no collective, nothing to agree on).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from tuitrain.core.control import MEMORY_ON_CPU
from tuitrain.core.safefile import open_nofollow, replacing
from tuitrain.metrics.records import event_record
from tuitrain.metrics.sinks import Sink
from tuitrain.rundir.layout import RunDir

VIEWER = "https://pytorch.org/memory_viz"
MAX_ENTRIES = 100_000  # alloc/free events kept (torchtitan's default): bounds host memory


class MemorySnapshot:
    """Starts recording at a step boundary on request, dumps and stops after N steps."""

    def __init__(self, device: torch.device, files: RunDir | None, enabled: bool = True) -> None:
        self.device = device
        self.files = files  # the run dir the snapshot goes to
        self.enabled = enabled  # False on DDP ranks other than 0
        self.pending = 0
        self.remaining = 0
        self.requested = 0
        self.first_step = 0
        self.recording = False

    def request(self, steps: int, sink: Sink) -> None:
        """Ask for N steps; on a CPU say once why nothing happens (a warning, not an error)."""
        if steps <= 0 or not self.enabled:
            return
        if self.device.type != "cuda":
            sink.write(event_record(MEMORY_ON_CPU, level="warning", kind="memory_snapshot"))
            return
        if self.files is None:
            sink.write(
                event_record(
                    "memory snapshot skipped: this run has no run dir to write it to",
                    level="warning",
                    kind="memory_snapshot",
                )
            )
            return
        self.pending = max(self.pending, steps)

    def maybe_start(self, step: int) -> None:
        if not self.pending or self.recording:
            return
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        self.recording = True
        self.requested, self.pending = self.pending, 0
        self.remaining = self.requested
        self.first_step = step + 1

    def after_step(self, step: int, sink: Sink) -> None:
        if not self.recording:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            self.finish(step, sink)

    def finish(self, step: int, sink: Sink, note: str = "") -> None:
        """Dump the recorded history to the run dir, stop recording, say where it went."""
        assert self.files is not None  # request() refuses a run without one
        try:
            path = write_snapshot(self.files.memory_snapshot(step))
        finally:
            self.stop()
        sink.write(
            event_record(
                f"memory snapshot of steps {self.first_step}-{step} in {path}{note}; drag it "
                f"onto {VIEWER} to see every allocation over time",
                kind="memory_snapshot",
                path=str(path),
            )
        )

    def on_oom(self, step: int, sink: Sink) -> None:
        """A CUDA out-of-memory error: write a snapshot before the run ends (best effort).
        With a recording on, its history up to the failure; else the allocator's state now
        (its segments and blocks, no history)."""
        if not self.enabled or self.files is None or self.device.type != "cuda":
            return
        had_history = self.recording
        try:
            path = write_snapshot(self.files.memory_snapshot(step))
        finally:
            self.stop()
        what = (
            f"the history recorded since step {self.first_step}"
            if had_history
            else "the allocator's state at the failure (no history: press m or pass "
            "--memory-snapshot-steps N to record one)"
        )
        sink.write(
            event_record(
                f"out of memory: memory snapshot in {path} ({what}); open it in {VIEWER}",
                level="warning",
                kind="memory_snapshot",
                path=str(path),
                history=had_history,
            )
        )

    def close(self, step: int, sink: Sink | None = None) -> None:
        """The run ends: with `sink`, dump what a recording cut short has; always stop it."""
        if not self.recording:
            return
        done = self.requested - self.remaining
        if sink is not None and done > 0:
            self.finish(step, sink, f" (the run ended after {done} of the {self.requested} steps)")
            return
        self.stop()

    def stop(self) -> None:
        if self.recording:
            self.recording = False
            torch.cuda.memory._record_memory_history(enabled=None)


def write_snapshot(path: Path) -> Path:
    """torch.cuda.memory._snapshot() pickled at `path` (what _dump_snapshot writes), through a
    fresh temp file (O_EXCL, never a link) renamed into place."""
    snapshot: Any = torch.cuda.memory._snapshot()
    with replacing(path) as tmp, open_nofollow(tmp, "wb") as f:
        pickle.dump(snapshot, f)
    return path
