"""Each rank's forward time between log points: the straggler measure under DDP.

Synchronous DDP runs the ranks in lockstep: a fast rank waits for the slowest one in the
gradient all-reduce, so every rank's step time is the same and cannot show who is slow.
What differs is the work a rank does on its own: waiting for its data and its forward pass.
The clock times the inner module's forward (hooks on it, so DDP's buffer broadcast, a
collective, is outside the measure); under torch.compile hooks would break the graph, so the
loop times the whole forward call instead (`timed()`).

On CPU the hooks read `time.perf_counter` (the forward is synchronous); on CUDA they record
events, read after the log point's sync: no host sync per step, and the events are reused from
one interval to the next (no allocation per step). Forwards in eval mode (the evaluation
between epochs) are not counted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


class ForwardClock:
    """Sums forward seconds over one log interval; `read()` after the interval's sync."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.handles: list[Any] = []
        self._free: list[Any] = []  # CUDA events read already, ready to record again
        self._events: list[tuple[Any, Any]] = []  # (start, end) per forward of the interval
        self._started: Any = None
        self._seconds = 0.0

    def attach(self, module: nn.Module) -> None:
        """Time every training-mode forward of `module` (not compiled: hooks run eagerly)."""

        def pre_hook(mod: nn.Module, *_: Any) -> None:
            if mod.training:  # the evaluation's forwards are not the step's work
                self.start()

        self.handles = [
            module.register_forward_pre_hook(pre_hook),
            module.register_forward_hook(lambda *_: self.stop()),
        ]

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def event(self) -> Any:
        return self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self.cuda:
            self._started = self.event()
            self._started.record()
        else:
            self._started = time.perf_counter()

    def stop(self) -> None:
        if self._started is None:
            return
        if self.cuda:
            end = self.event()
            end.record()
            self._events.append((self._started, end))
        else:
            self._seconds += time.perf_counter() - self._started
        self._started = None

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Time a block (the compiled forward call) instead of the hooks."""
        self.start()
        try:
            yield
        finally:
            self.stop()

    def reset(self) -> None:
        """Drop the interval's figures; its CUDA events go back to the pool (recording an
        event again is allowed whether or not its earlier record has completed)."""
        self._seconds = 0.0
        for pair in self._events:
            self._free.extend(pair)
        self._events = []
        if self.cuda and self._started is not None:
            self._free.append(self._started)
        self._started = None

    def read(self) -> float:
        """Forward seconds since the last reset (CUDA: call after a sync), then reset."""
        seconds = self._seconds + sum(a.elapsed_time(b) for a, b in self._events) / 1000.0
        self.reset()
        return seconds
