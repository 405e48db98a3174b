"""What the fashion presets reach: `tuitrain --no-ui --preset P --epochs N --seed S`, per seed.

Each run is the real command line in a child process (run dir in a temporary folder); the
figures come from its metrics.jsonl: the validation accuracy on the 10,000 test images after
every epoch, and the run's wall time (`end.elapsed_s`, evaluations included) over its epochs.

    python bench/preset_accuracy.py --presets fashion-fp32 --seeds 0 1 2 --epochs 10

prints one JSON summary (per preset: final accuracy per seed, mean, min-max spread, the
per-epoch curve of each seed, seconds per epoch), progress on stderr. `--parallel 2` runs two
seeds at once with one torch thread each (on a 2-core machine: the same figures in about the
same total time, but the seconds per epoch are then those of one thread, and say so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, emit, machine, note  # noqa: E402


def one_run(preset: str, seed: int, epochs: int, threads: int | None, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="tuitrain-acc-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "tuitrain", "--no-ui", "--preset", preset]
        cmd += ["--epochs", str(epochs), "--seed", str(seed), "--run-dir", str(run_dir), *extra]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        records = [
            json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        ]
    evals = [r["val_acc"] for r in records if r["type"] == "eval"]
    end = next(r for r in records if r["type"] == "end")
    header = next(r for r in records if r["type"] == "header")
    note(f"{preset} seed {seed}: {evals[-1] * 100:.2f}% after {epochs} epochs, {wall:.0f} s")
    return {
        "seed": seed,
        "final_acc": evals[-1],
        "acc_per_epoch": [round(a, 4) for a in evals],
        "s_per_epoch": round(end["elapsed_s"] / epochs, 1),
        "process_wall_s": round(wall, 1),
        "precision": header["precision"],
        "device": header["device_name"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["fashion-fp32"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--set", action="append", default=[], help="passed on as --set")
    args = parser.parse_args()
    extra = [item for s in args.set for item in ("--set", s)]
    threads = max(1, (os.cpu_count() or 1) // args.parallel) if args.parallel > 1 else None
    summary: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
        "torch_threads_per_run": threads or "torch default",
        "presets": {},
    }
    for preset in args.presets:
        with ThreadPoolExecutor(args.parallel) as pool:
            jobs = [
                pool.submit(one_run, preset, s, args.epochs, threads, extra) for s in args.seeds
            ]
            runs = [job.result() for job in jobs]
        finals = [r["final_acc"] * 100 for r in runs]
        summary["presets"][preset] = {
            "epochs": args.epochs,
            "final_acc_pct": [round(f, 2) for f in finals],
            "mean_pct": round(statistics.mean(finals), 2),
            "min_pct": round(min(finals), 2),
            "max_pct": round(max(finals), 2),
            "stdev_pct": round(statistics.stdev(finals), 2) if len(finals) > 1 else None,
            "s_per_epoch": statistics.median(r["s_per_epoch"] for r in runs),
            "runs": runs,
        }
    emit(summary)


if __name__ == "__main__":
    main()
