"""Issue #31: `tuitrain export` streams: its peak memory does not grow with the file.

    python bench/export_memory.py --mb 200 --repeats 3
    python bench/export_memory.py --mb 200 --repeats 3 --tree BEFORE   # another checkout

Writes a metrics.jsonl of about --mb MB once (a header, then train records with every
contract field, an eval every 100), then runs `python -m tuitrain export RUN --format csv`
in a fresh process per repeat and reads that child's peak RSS from `os.wait4` (ru_maxrss),
with the wall time. A 1-record file gives the baseline (Python and the imports). `--tree DIR`
runs another checkout's tuitrain on the same file (e.g. `git archive a35584c tuitrain | tar
-x -C DIR` for the export before issue #31). Prints one JSON summary: median and min-max.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, emit, machine, spread

MB = 1 << 20


def train(step: int) -> dict[str, Any]:
    return {"type": "train", "step": step, "epoch": step / 234, "samples": step * 256,
            "loss": 0.35 + 1.0 / (1 + step), "lr": 2e-3, "samples_per_s": 3210.5,
            "step_time_s": 0.0797, "data_wait_s": 0.0004, "data_wait_frac": 0.005,
            "mem_alloc_bytes": None, "mem_reserved_bytes": None, "mem_peak_bytes": None,
            "host_rss_bytes": 812 << 20, "gpu_util_pct": None, "gpu_mem_used_bytes": None,
            "grad_scale": None, "skipped_steps": None, "grad_norm": 1.25, "tflops": 0.088,
            "mfu": None, "host_syncs": 1, "syncs_per_step": 0.05, "monitor_s": 0.0001,
            "monitor_frac": 0.0006}  # fmt: skip


def write_run(folder: Path, megabytes: float) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    records = 0
    with open(folder / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"type": "header", "preset": "fashion-mini", "config": {}}) + "\n")
        size, step = 0, 0
        while size < megabytes * MB:
            step += 10
            line = json.dumps(train(step)) + "\n"
            if step % 1000 == 0:
                line += json.dumps({"type": "eval", "step": step, "val_loss": 0.4}) + "\n"
            f.write(line)
            size += len(line)
            records += 1
    return records


def export_once(tree: Path, run: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one `tuitrain export` child."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "tuitrain", "export", str(run), "--format", "csv"]
    started = time.perf_counter()
    proc = subprocess.Popen(  # cwd: `-m` looks in the current folder first
        [*cmd, "--out", str(out)], env=env, cwd=tree, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"export exited {proc.returncode}")
    return usage.ru_maxrss / 1024, seconds  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=REPO, help="whose tuitrain runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        records = write_run(big, args.mb)
        write_run(small, 0)
        rss, secs, base = [], [], []
        for _ in range(args.repeats):
            peak, took = export_once(args.tree, big, Path(tmp) / "big.csv")
            rss.append(peak)
            secs.append(took)
            base.append(export_once(args.tree, small, Path(tmp) / "small.csv")[0])
        emit(
            {
                "bench": "export_memory",
                "tree": str(args.tree),
                "file_mb": round((big / "metrics.jsonl").stat().st_size / MB, 1),
                "records": records,
                "peak_rss_mb": spread(rss),
                "baseline_peak_rss_mb": spread(base),
                "seconds": spread(secs),
                "machine": machine(),
            }
        )


if __name__ == "__main__":
    main()
