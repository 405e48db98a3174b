"""DDP against FSDP2 on the same job, and what watching the ranks costs under each.

    python bench/strategies.py --steps 120 --repeats 3                  # this CPU: 2 ranks, gloo
    python bench/strategies.py --device cuda --nproc 8 --preset charlm-bf16 --steps 300
                                                                        # a multi-GPU node, nccl

Layouts, interleaved in each repeat (A B C D A B C D ...) so the machine's load hits them alike,
each `tuitrain --nproc N --no-ui` of the same preset, seed and steps:

- `ddp`, `fsdp`: `distributed.strategy`, everything else as shipped (the rank watch on);
- `ddp-nowatch`, `fsdp-nowatch`: the same with `alerts.stalled_rank = "off"` (no heartbeat
  thread): the pair gives the stalled-rank watch's cost under each strategy.

From each run's own records (after the first log interval): tokens/s (global), the largest
per-rank peak memory (the device allocator's where there is one, else host RSS:
`rank_mem_peak_bytes` / `rank_host_rss_bytes`), the share of the step in collectives
(`comm_frac`, `comm_exposed_frac`: DDP) and the engine's own time on metrics at log points
(`monitor_frac`). The comm clock itself cannot be switched off; its cost per collective is
measured apart (BENCHMARKS.md). No evaluation, no checkpoints. Prints a JSON summary with the
per-repeat ratios fsdp/ddp and nowatch/watch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import REPO, emit, machine, note, spread, train_stats

LAYOUTS = {
    "ddp": ("ddp", True),
    "fsdp": ("fsdp", True),
    "ddp-nowatch": ("ddp", False),
    "fsdp-nowatch": ("fsdp", False),
}


def run_layout(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    strategy, watch = LAYOUTS[name]
    run_dir = work / name
    cmd = [
        sys.executable, "-m", "tuitrain", "--nproc", str(args.nproc), "--no-ui",
        "--preset", args.preset, "--max-steps", str(args.steps),
        "--set", f"train.log_every={args.log_every}",
        "--set", "train.eval_every=0",
        "--set", "train.eval_every_epoch=false",
        "--set", f'train.device="{args.device}"',
        "--set", f'distributed.strategy="{strategy}"',
        "--set", "checkpoint.at_epoch_end=false",
        "--set", "checkpoint.on_stop=false",
        "--set", "data.val_samples=64",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    if not watch:
        cmd += ["--set", 'alerts.stalled_rank="off"']
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    stats: dict[str, Any] = train_stats(records, epoch_restarts=False)
    train = [r for r in records if r.get("type") == "train"][1:]
    tokens = [r["tokens_per_s"] for r in train if r.get("tokens_per_s")]
    stats["tokens_per_s"] = statistics.median(tokens) if tokens else None
    last = train[-1] if train else {}
    memory = last.get("rank_mem_peak_bytes") or last.get("rank_host_rss_bytes") or []
    stats["peak_memory_per_rank_mib"] = max(memory) / 2**20 if memory else None
    stats["memory_kind"] = "device peak" if last.get("rank_mem_peak_bytes") else "host RSS"
    for key in ("comm_frac", "comm_exposed_frac", "monitor_frac"):
        values = [r[key] for r in train if r.get(key) is not None]
        stats[key] = statistics.median(values) if values else None
    stats["loss_end"] = last.get("loss")
    return stats


def ratios(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> dict[str, Any]:
    pairs = [(x[key], y[key]) for x, y in zip(a, b, strict=True) if x[key] and y[key]]
    return spread([x / y for x, y in pairs])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="charlm-mini")
    ap.add_argument("--steps", type=int, default=120, help="optimizer steps per run")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2, help="ranks (GPUs on a CUDA node)")
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl)")
    ap.add_argument("--only", default=",".join(LAYOUTS), help="layouts, comma-separated")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        sys.exit(f"strategies.py: unknown layout {unknown[0]!r}; choose from {', '.join(LAYOUTS)}")
    info = machine()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="tuitrain-strategies-") as tmp:
        for r in range(args.repeats):
            for name in names:
                stats = run_layout(name, args, Path(tmp) / f"r{r}")
                note(f"repeat {r} {name}: {stats['tokens_per_s'] or 0:,.0f} tokens/s")
                results[name].append(stats)
    summary: dict[str, Any] = {
        "machine": info, "device": args.device, "nproc": args.nproc, "preset": args.preset,
        "steps": args.steps, "repeats": args.repeats,
    }  # fmt: skip
    for name, runs in results.items():
        summary[name] = {
            key: spread([s[key] for s in runs if s[key] is not None], 4)
            for key in ("tokens_per_s", "peak_memory_per_rank_mib", "comm_frac",
                        "comm_exposed_frac", "monitor_frac", "loss_end")
        }  # fmt: skip
        summary[name]["memory_kind"] = runs[0]["memory_kind"]
    if "ddp" in results and "fsdp" in results:
        summary["fsdp_over_ddp_tokens"] = ratios(results["fsdp"], results["ddp"], "tokens_per_s")
    for strategy in ("ddp", "fsdp"):
        quiet = f"{strategy}-nowatch"
        if strategy in results and quiet in results:
            summary[f"{strategy}_watch_over_nowatch_tokens"] = ratios(
                results[strategy], results[quiet], "tokens_per_s"
            )
    emit(summary)


if __name__ == "__main__":
    main()
