"""The thread-safe control object: the only way the UI (or a signal) steers a running engine.

The trainer polls it at step boundaries; nothing here touches torch.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

MEMORY_ON_CPU = "memory snapshots record the CUDA allocator; this run is on CPU: nothing to record"


class Control:
    """Stop, pause/resume, checkpoint-now, profile and memory snapshot requests, polled between
    steps."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._running = threading.Event()  # set = not paused
        self._running.set()
        self._lock = threading.Lock()
        self.stop_reason = ""
        self.exit_code: int | None = None  # set by signal handlers (130, 143)
        self._checkpoint = False
        self._profile_steps = 0
        self._memory_steps = 0
        self.step = 0  # the last optimizer step the engine finished (set by the engine)
        # A second Ctrl-C/SIGTERM "leaves now" (launch.on_signal) by raising SystemExit in
        # the main thread, wherever it is; never inside a checkpoint save or the end record:
        # there it waits for the section's end (torch.save would turn it into a RuntimeError
        # and the record could be torn).
        self.leave_code: int | None = None
        self._critical = 0
        self.state = "idle"  # set by the engine: starting, compiling, running, paused, ...

    # -- requests (any thread) ---------------------------------------------------------
    def request_stop(self, reason: str = "stopped by user", exit_code: int | None = None) -> None:
        with self._lock:
            if not self._stop.is_set():
                self.stop_reason = reason
                self.exit_code = exit_code
        self._stop.set()
        self._running.set()  # a paused engine must wake up to stop

    def sleep(self, seconds: float) -> None:
        """Sleep that a stop request cuts short (train.pace_s)."""
        self._stop.wait(seconds)

    def pause(self) -> None:
        if not self._stop.is_set():
            self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def toggle_pause(self) -> bool:
        """Pause if running, resume if paused; returns True when now paused."""
        if self.paused:
            self.resume()
        else:
            self.pause()
        return self.paused

    def request_checkpoint(self) -> None:
        with self._lock:
            self._checkpoint = True

    def request_profile(self, steps: int) -> None:
        with self._lock:
            self._profile_steps = steps

    def request_memory_snapshot(self, steps: int) -> None:
        with self._lock:
            self._memory_steps = steps

    @property
    def in_critical(self) -> bool:
        return self._critical > 0

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A section a second signal must not cut; if one came meanwhile, leave after it."""
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1
        if not self._critical and self.leave_code is not None:
            code, self.leave_code = self.leave_code, None  # raised once
            raise SystemExit(code)

    # -- polled by the engine --------------------------------------------------------------
    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_while_paused(self, poll_s: float = 0.1) -> None:
        while not self._running.wait(poll_s):
            pass

    def take_checkpoint_request(self) -> bool:
        with self._lock:
            wanted, self._checkpoint = self._checkpoint, False
        return wanted

    def take_profile_request(self) -> int:
        with self._lock:
            steps, self._profile_steps = self._profile_steps, 0
        return steps

    def take_memory_snapshot_request(self) -> int:
        with self._lock:
            steps, self._memory_steps = self._memory_steps, 0
        return steps
