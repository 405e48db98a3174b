"""torch.profiler over the next N steps: the top-15 table by device time and a Chrome/Perfetto
trace (`profile-stepN.txt`, `profile-stepN.trace.json`) go to the run dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from tuitrain.core.safefile import open_nofollow, replacing
from tuitrain.metrics.records import event_record
from tuitrain.metrics.sinks import Sink
from tuitrain.rundir.layout import RunDir

TOP_ROWS = 15
# Profiled but not counted: the profiler's own start-up (and the first step's allocations)
# would otherwise dominate the first step of the table and the trace.
WARMUP_STEPS = 1


class StepProfiler:
    """Starts on request (never on the first, compiling step) and stops after N steps."""

    def __init__(self, device: torch.device, files: RunDir | None) -> None:
        self.device = device
        self.files = files  # the run dir the profile's table and trace go to
        self.pending = 0
        self.remaining = 0
        self.requested = 0  # steps the running profile was asked for
        self._prof: Any = None

    def request(self, steps: int) -> None:
        if steps > 0:
            self.pending = max(self.pending, steps)

    def maybe_start(self, steps: int | None, step: int) -> None:
        if steps:
            self.request(steps)
        if self.pending and self._prof is None and step >= 1:
            activities = [ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            plan = schedule(wait=0, warmup=WARMUP_STEPS, active=self.pending, repeat=1)
            self._prof = profile(activities=activities, schedule=plan, record_shapes=False)
            self._prof.__enter__()
            self.requested, self.pending = self.pending, 0
            self.remaining = self.requested + WARMUP_STEPS
            self.first_step = step + 1 + WARMUP_STEPS  # the first step counted

    def after_step(self, sink: Sink) -> None:
        if self._prof is None:
            return
        self.remaining -= 1
        if self.remaining > 0:
            self._prof.step()  # warm-up -> recording; nothing else between steps
            return
        self.finish(sink)

    def finish(self, sink: Sink, note: str = "") -> None:
        """Stop the profiler and write its table (to the run dir and as a `profile` event)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # sync point: the profile must see all kernels
        self._prof.__exit__(None, None, None)
        sort_by = "self_cuda_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        table = self._prof.key_averages().table(sort_by=sort_by, row_limit=TOP_ROWS)
        prof, self._prof = self._prof, None
        where, trace = "", None
        if self.files is not None:
            path = self.files.profile_table(self.first_step)
            with open_nofollow(path, "w", encoding="utf-8") as f:
                f.write(table + "\n")
            trace = export_trace(prof, self.files.profile_trace(self.first_step))
            where = f", table in {path}, trace in {trace} (open in https://ui.perfetto.dev)"
        sort_name = "device" if self.device.type == "cuda" else "CPU"
        sink.write(
            event_record(
                f"profiled steps from {self.first_step} (top {TOP_ROWS} by "
                f"self {sort_name} time{where}){note}",
                kind="profile",
                table=table,
                trace=str(trace) if trace else None,
            )
        )

    def close(self, sink: Sink | None = None) -> None:
        """End a profile still open when the run stops or fails: a profiler left running
        crashes the interpreter at exit. With `sink` (the run ended normally or was stopped),
        the steps profiled so far are reported rather than dropped."""
        done = self.requested - self.remaining  # counted steps done (not the warm-up)
        if self._prof is not None and sink is not None and done > 0:
            self.finish(sink, f"; the run ended after {done} of the {self.requested} steps")
            return
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)


def export_trace(prof: Any, path: Path) -> Path:
    """The profile as Chrome/Perfetto JSON at `path`. torch writes by name, so it writes to a
    fresh temp file created here (O_EXCL, never a link), renamed over `path` (a link planted
    there is replaced, never written through)."""
    with replacing(path) as tmp:
        prof.export_chrome_trace(str(tmp))
    return path
