"""DDP: one process against several, through `tuitrain --nproc` (gloo on CPU, nccl on CUDA).

    python bench/ddp.py --steps 60 --repeats 3                       # this CPU: 1 vs 2
    python bench/ddp.py --device cuda --nprocs 1,2,4,8 --steps 200    # a multi-GPU machine

Layouts, interleaved in each repeat so that the machine's load hits all of them alike:

- `1p-256`: one process, `data.batch_size` 256 (on CPU torch's default threads: every core);
- `Np-256`: `tuitrain --nproc N`, 256 per rank (global batch N x 256: the usual scale-out);
- `Np-(256/N)`: 256/N per rank (global batch 256: the same optimisation as one process).

On CPU torchrun gives each rank OMP_NUM_THREADS=1 unless it is set, so every layout has the
machine's cores. Each run is one epoch of exactly --steps optimizer steps on the full Fashion-MNIST
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


def layouts(nprocs: list[int], batch: int) -> dict[str, tuple[int, int]]:
    out = {}
    for n in nprocs:
        out[f"{n}p-{batch}"] = (n, batch)
        if n > 1:
            out[f"{n}p-{batch // n}"] = (n, batch // n)
    return out


def run_layout(
    name: str, nproc: int, batch: int, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    steps, log_every = args.steps, args.log_every
    run_dir = work / name
    cmd = [
        sys.executable, "-m", "tuitrain", "--no-ui", "--preset", "fashion-bf16",
        "--set", f"data.train_samples={steps * batch * nproc}",
        "--set", f"data.batch_size={batch}",
        "--set", "train.epochs=1",
        "--set", "train.eval_every_epoch=false",
        "--set", f"train.log_every={log_every}",
        "--set", f'train.device="{args.device}"',
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
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl)")
    ap.add_argument("--nprocs", default="1,2", help="process counts, the first is the base")
    ap.add_argument("--batch", type=int, default=256, help="per-rank batch of the base")
    args = ap.parse_args()
    info = machine()
    plan = layouts([int(n) for n in args.nprocs.split(",")], args.batch)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in plan}
    with tempfile.TemporaryDirectory(prefix="tuitrain-ddp-bench-") as tmp:
        for r in range(args.repeats):
            for name, (nproc, batch) in plan.items():
                work = Path(tmp) / f"r{r}"
                stats = run_layout(name, nproc, batch, args, work)
                note(f"repeat {r} {name}: {stats['samples_per_s']:,.0f} samples/s")
                results[name].append(stats)
    summary: dict[str, Any] = {
        "machine": info, "device": args.device, "steps": args.steps, "repeats": args.repeats,
    }  # fmt: skip
    base = [s["samples_per_s"] for s in next(iter(results.values()))]
    for name, runs in results.items():
        rates = [s["samples_per_s"] for s in runs]
        summary[name] = {
            "world_size": runs[0]["world_size"],
            "global_batch": runs[0]["global_batch"],
            "samples_per_s": spread(rates, 0),
            "data_wait_frac": spread([s["data_wait_frac"] for s in runs], 4),
            "ratio_to_base": spread([a / b for a, b in zip(rates, base, strict=True)]),
        }
    emit(summary)


if __name__ == "__main__":
    main()
