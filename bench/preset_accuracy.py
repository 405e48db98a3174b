"""What the fashion presets reach: `tuitrain --no-ui --preset P --epochs N --seed S`, per seed.

Each run is the real command line in a child process; the figures come from its
metrics.jsonl: the validation accuracy on the 10,000 test images after every epoch, and the
run's wall time (`end.elapsed_s`, evaluations included) over its epochs.

    python bench/preset_accuracy.py --presets fashion-fp32 --seeds 0 1 2 --epochs 10

prints one JSON summary (per preset: final accuracy per seed, mean, min-max spread, the
per-epoch curve of each seed, seconds per epoch), progress on stderr. `--parallel 2` runs two
runs at once (all presets' runs share one pool) with cores/2 torch threads each (on a 2-core
machine: the same figures in about the same total time, but the seconds per epoch are then
those of one thread, and say so). `--epochs 0` runs each preset for its own epochs.

`--runs-dir DIR` keeps every run's folder (DIR/PRESET-seedS, metrics.jsonl and checkpoints)
instead of a temporary one, and `--summarise DIR` rebuilds the summary from such a folder
alone: a run that a time budget cut short appears with the epochs it finished
(`complete: false`), so a cut loses only what was not measured (bench/gpu_accuracy.sh).
A run that fails is reported (`error`) and the others go on; the exit code is 1 then.
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


def read_run(run_dir: Path) -> dict[str, Any]:
    """One run's figures from its metrics.jsonl (finished, cut short or failed)."""
    records = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # the last line of a killed run may be half-written
            break
    header = next((r for r in records if r["type"] == "header"), {})
    evals = [r for r in records if r["type"] == "eval"]
    end = next((r for r in records if r["type"] == "end"), None)
    epochs_planned = (header.get("config") or {}).get("train", {}).get("epochs")
    out: dict[str, Any] = {
        "preset": header.get("preset"),
        "seed": (header.get("config") or {}).get("train", {}).get("seed"),
        "epochs": epochs_planned,
        "epochs_done": len(evals),
        "complete": bool(end and end.get("status") == "completed"),
        "final_acc": evals[-1]["val_acc"] if evals else None,
        "acc_per_epoch": [round(r["val_acc"], 4) for r in evals],
        "precision": header.get("precision"),
        "device": header.get("device_name"),
    }
    if end is not None:
        out["end"] = {"status": end.get("status"), "reason": end.get("reason")}
        if out["complete"] and evals and end.get("elapsed_s"):
            out["s_per_epoch"] = round(end["elapsed_s"] / len(evals), 1)
    return out


def one_run(
    preset: str, seed: int, epochs: int, threads: int | None, extra: list[str], runs_dir: Path
) -> dict[str, Any]:
    run_dir = runs_dir / f"{preset}-seed{seed}"
    cmd = [sys.executable, "-m", "tuitrain", "--no-ui", "--preset", preset, "--seed", str(seed)]
    cmd += ["--epochs", str(epochs)] if epochs else []
    cmd += ["--run-dir", str(run_dir), *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False)
    wall = time.perf_counter() - started
    try:
        result = read_run(run_dir)
    except (OSError, StopIteration) as exc:
        result = {"preset": preset, "seed": seed, "complete": False, "final_acc": None}
        result["error"] = f"no metrics ({exc})"
    result["process_wall_s"] = round(wall, 1)
    if proc.returncode != 0:
        result["error"] = f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-1500:]}"
        note(f"{preset} seed {seed}: FAILED (exit {proc.returncode}) after {wall:.0f} s")
    else:
        note(f"{preset} seed {seed}: {result['final_acc'] * 100:.2f}% after {wall:.0f} s")
    return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per preset: the final accuracy of each seed, mean, spread, seconds per epoch."""
    presets: dict[str, Any] = {}
    for name in dict.fromkeys(str(r.get("preset")) for r in runs):
        mine = sorted((r for r in runs if str(r.get("preset")) == name), key=lambda r: r["seed"])
        done = [r for r in mine if r.get("complete") and r.get("final_acc") is not None]
        finals = [r["final_acc"] * 100 for r in done]
        times = [r["s_per_epoch"] for r in mine if r.get("s_per_epoch")]
        presets[name] = {
            "epochs": mine[0].get("epochs"),
            "seeds_complete": [r["seed"] for r in done],
            "final_acc_pct": [round(f, 2) for f in finals],
            "mean_pct": round(statistics.mean(finals), 2) if finals else None,
            "min_pct": round(min(finals), 2) if finals else None,
            "max_pct": round(max(finals), 2) if finals else None,
            "stdev_pct": round(statistics.stdev(finals), 2) if len(finals) > 1 else None,
            "s_per_epoch": statistics.median(times) if times else None,
            "runs": mine,
        }
    return presets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["fashion-fp32"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=10, help="0 = each preset's own")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=0, help="torch threads a run (0: auto)")
    parser.add_argument("--set", action="append", default=[], help="passed on as --set")
    parser.add_argument("--runs-dir", type=Path, help="keep the run folders here")
    parser.add_argument("--summarise", type=Path, help="only summarise this --runs-dir")
    args = parser.parse_args()
    summary: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
    }
    if args.summarise:
        folders = sorted(p.parent for p in args.summarise.glob("*/metrics.jsonl"))
        runs = [read_run(folder) for folder in folders]
        summary["presets"] = summarise(runs)
        emit(summary)
        return
    extra = [item for s in args.set for item in ("--set", s)]
    threads = args.threads or (
        max(1, (os.cpu_count() or 1) // args.parallel) if args.parallel > 1 else None
    )
    summary["torch_threads_per_run"] = threads or "torch default"
    with tempfile.TemporaryDirectory(prefix="tuitrain-acc-") as tmp:
        runs_dir = args.runs_dir or Path(tmp)
        runs_dir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.parallel) as pool:
            jobs = [
                pool.submit(one_run, p, s, args.epochs, threads, extra, runs_dir)
                for p in args.presets
                for s in args.seeds
            ]
            runs = [job.result() for job in jobs]
    summary["presets"] = summarise(runs)
    emit(summary)
    if any("error" in r for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
