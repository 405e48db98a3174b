"""Diagnoses shared by the engine and the UI (no torch import: the UI loads it at start)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

WARN_DATA_WAIT = 0.10
INPUT_BOUND_DATA_WAIT = 0.20
SCALE_FLOOR = 1.0  # an fp16 scale below this means gradients overflow again and again
STRAGGLER_FACTOR = 1.2  # the slowest rank's step time above this x the median: a straggler


def data_wait_verdict(frac: float | None) -> tuple[str, str]:
    """(verdict, hint) for a data-wait share: ok, warning above 10%, input-bound above 20%."""
    if frac is None:
        return "unknown", ""
    if frac > INPUT_BOUND_DATA_WAIT:
        return "input-bound", (
            "the loop waits for data: use data.loader='device' when the set fits on the device, "
            "else raise data.num_workers and keep data.pin_memory=true"
        )
    if frac > WARN_DATA_WAIT:
        return "warning", (
            "data loading is visible: raise data.num_workers or use data.loader='device'"
        )
    return "ok", ""


def straggler(step_times: Sequence[float], factor: float = STRAGGLER_FACTOR) -> int | None:
    """The slowest rank when its step time is above `factor` x the median, else None."""
    times = [t for t in step_times if t == t]  # NaN: a rank without a measurement
    if len(times) < 2 or len(times) != len(step_times):
        return None
    median = statistics.median(times)
    slowest = max(range(len(times)), key=times.__getitem__)
    return slowest if times[slowest] > factor * median else None
