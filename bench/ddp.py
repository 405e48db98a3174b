"""DDP on this machine's CPU: one process against two (gloo), through `tuitrain --nproc`.

    python bench/ddp.py --steps 60 --repeats 3

Three layouts, interleaved in each repeat so that the machine's load hits all of them alike:

- `1p`: one process, `data.batch_size` 256 (torch's default threads: every core);
- `2p-256`: `tuitrain --nproc 2`, 256 per rank (global batch 512: the usual scale-out);
- `2p-128`: `tuitrain --nproc 2`, 128 per rank (global batch 256: the same optimisation as 1p).

torchrun gives each rank OMP_NUM_THREADS=1 unless it is set, so every layout has the machine's
cores. Each run is one epoch of exactly --steps optimizer steps on the full Fashion-MNIST
(preset fashion-bf16), no evaluation and no checkpoints; throughput is the global samples/s
of the engine's own train records after the first log interval (warm-up), as in the other
benches. Prints a JSON summary: samples/s per layout and the per-repeat ratios to 1p.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import REPO, emit, machine, note, spread, train_stats

LAYOUTS = {"1p": (1, 256), "2p-256": (2, 256), "2p-128": (2, 128)}


def run_layout(name: str, steps: int, log_every: int, work: Path) -> dict[str, Any]:
    nproc, batch = LAYOUTS[name]
    run_dir = work / name
    cmd = [
        sys.executable, "-m", "tuitrain", "--no-ui", "--preset", "fashion-bf16",
        "--set", f"data.train_samples={steps * batch * nproc}",
        "--set", f"data.batch_size={batch}",
        "--set", "train.epochs=1",
        "--set", "train.eval_every_epoch=false",
        "--set", f"train.log_every={log_every}",
        "--set", 'train.device="cpu"',
        "--set", "checkpoint.at_epoch_end=false",
        "--set", "checkpoint.on_stop=false",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    if nproc > 1:
        cmd[3:3] = ["--nproc", str(nproc)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    stats = train_stats(records, epoch_restarts=False)
    header = records[0]
    stats["world_size"] = header["world_size"]
    stats["global_batch"] = header["global_batch"]
    end = records[-1]
    stats["wall_run_s"] = end.get("elapsed_s")
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    info = machine()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="tuitrain-ddp-bench-") as tmp:
        for r in range(args.repeats):
            for name in LAYOUTS:
                work = Path(tmp) / f"r{r}"
                stats = run_layout(name, args.steps, args.log_every, work)
                note(f"repeat {r} {name}: {stats['samples_per_s']:,.0f} samples/s")
                results[name].append(stats)
    summary: dict[str, Any] = {"machine": info, "steps": args.steps, "repeats": args.repeats}
    base = [s["samples_per_s"] for s in results["1p"]]
    for name, runs in results.items():
        rates = [s["samples_per_s"] for s in runs]
        summary[name] = {
            "world_size": runs[0]["world_size"],
            "global_batch": runs[0]["global_batch"],
            "samples_per_s": spread(rates, 0),
            "data_wait_frac": spread([s["data_wait_frac"] for s in runs], 4),
            "ratio_to_1p": spread([a / b for a, b in zip(rates, base, strict=True)]),
        }
    emit(summary)


if __name__ == "__main__":
    main()
