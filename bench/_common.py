"""Shared helpers for the benchmark scripts: statistics, machine facts, a capturing sink.

Not a benchmark itself. Every script in bench/ prints one JSON summary on stdout; the
figures that matter are ratios measured in interleaved pairs (A B A B ...), summarised by
the median and the min-max spread, because the machine is shared and noisy.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FASHION_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")


def spread(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """Median, min, max and n of a list of figures (ratios, samples/s, seconds)."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
    }


def machine() -> dict[str, Any]:
    """What the figures were measured on (CPU model and flags, cores, torch, load)."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = next(
            line.split(":", 1)[1].strip() for line in text.splitlines() if "model name" in line
        )
        info["cpu"] = model
        info["avx512_bf16"] = "avx512_bf16" in text
        info["amx_bf16"] = "amx_bf16" in text
    except (OSError, StopIteration):
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        pass
    return info


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def emit(summary: Mapping[str, Any]) -> None:
    """Print the JSON summary (the one thing on stdout)."""
    json.dump(summary, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """Progress goes to stderr so stdout stays one JSON document."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_json(cmd: list[str], timeout: float = 900.0) -> dict[str, Any]:
    """Run a child that prints one JSON object as its last stdout line; return it."""
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_stats(
    records: Sequence[Mapping[str, Any]], skip: int = 1, *, epoch_restarts: bool = True
) -> dict[str, float]:
    """Throughput and data-wait share over the train records after the first `skip` (>= 1).

    The interval wall time is samples / samples_per_s; the share is total wait / total wall,
    so long intervals weigh more than short ones (the same as timing the whole window).
    With `epoch_restarts`, an interval that spans an epoch end is left out: the engine
    restarts its clock after the evaluation and the checkpoint there, so its samples are
    fewer than the step count says (pass False when neither happens: no eval, no run dir).
    """
    header = next((r for r in records if r.get("type") == "header"), {})
    per_epoch = int(header.get("steps_per_epoch") or 0) if epoch_restarts else 0
    train = [r for r in records if r.get("type") == "train"]
    skip = max(skip, 1)  # the first interval holds the warm-up (allocator, oneDNN primitives)
    samples = wall = wait = 0.0
    for before, r in zip(train[skip - 1 :], train[skip:], strict=False):
        if per_epoch and (r["step"] - 1) // per_epoch != before["step"] // per_epoch:
            continue  # an epoch end (eval, checkpoint) inside the interval
        n = r["samples"] - before["samples"]
        samples += n
        wall += n / r["samples_per_s"]
        wait += r["data_wait_s"]
    if not wall:
        raise ValueError("no train records after the warm-up interval; raise --steps")
    return {"samples_per_s": samples / wall, "data_wait_frac": wait / wall, "wall_s": wall}


def engine_records(
    preset: str, overrides: list[str], stop_after: int | None = None
) -> list[dict[str, Any]]:
    """Run the engine in this process (`tuitrain.engine.runner.run`) and return its records.

    The sink only collects; the figures come from the engine's own train records. With
    `stop_after`, the sink asks the engine to stop once the train record of that step has
    arrived (a stop skips the final evaluation, which under torch.compile means a recompile).
    """
    from tuitrain.core.config import load_preset
    from tuitrain.core.control import Control
    from tuitrain.engine.runner import run
    from tuitrain.metrics.sinks import Sink

    control = Control()

    class CaptureSink(Sink):
        def __init__(self) -> None:
            self.records: list[dict[str, Any]] = []

        def write(self, record: Mapping[str, Any]) -> None:
            self.records.append(dict(record))
            step = record.get("step")
            if stop_after and record.get("type") == "train" and step and step >= stop_after:
                control.request_stop("benchmark window done")

    sink = CaptureSink()
    result = run(load_preset(preset, overrides), sink, control)
    if result.status == "failed" or (result.status == "stopped" and not stop_after):
        raise RuntimeError(f"{preset} {overrides}: {result.status}: {result.reason}")
    return sink.records
