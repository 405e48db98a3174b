"""Item 5: memory bound of the metric store: one million steps of every metric.

    python bench/store_memory.py --steps 1000000

Pushes --steps `train` records carrying every field of the metric contract with a number
(the CUDA/NVML/scaler fields filled as on a GPU run, so every series exists), plus one
`eval` and one `event` record every --eval-every steps, into a fresh `MetricStore`.
Records are made on the fly and dropped, so what grows is the store. Measures the RSS
growth (from /proc/self/statm, after a gc) against the RSS before the store existed,
the push cost, the time of `snapshot()` (cold: every series changed; warm: nothing
changed) and of `Series.decimate(80)` on the loss series.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from typing import Any

from _common import emit, machine, note, rss_bytes, spread

from tuitrain.metrics.store import MetricStore

MB = 1 << 20


def train_record(step: int) -> dict[str, Any]:
    """A train record with every contract field set (a new float object per field)."""
    s = float(step)
    return {
        "type": "train",
        "step": step,
        "epoch": s / 234.0,
        "samples": step * 256,
        "loss": 2.3 * math.exp(-s / 2e5) + 1e-3 * (step % 97),
        "lr": 3e-3 * (1.0 - s / 2e6),
        "samples_per_s": 2900.0 + (step % 13),
        "step_time_s": 0.088 + 1e-5 * (step % 7),
        "data_wait_s": 0.0002 * (step % 5),
        "data_wait_frac": 0.002 + 1e-4 * (step % 11),
        "mem_alloc_bytes": 1_000_000 + step % 4096,
        "mem_reserved_bytes": 2_000_000 + step % 8192,
        "mem_peak_bytes": 3_000_000 + step,
        "host_rss_bytes": 800_000_000 + step % 65536,
        "gpu_util_pct": float(step % 100),
        "gpu_mem_used_bytes": 4_000_000 + step % 1024,
        "grad_scale": 65536.0 / (1 + step % 3),
        "skipped_steps": step // 10_000,
        "grad_norm": 1.0 + 1e-3 * (step % 101),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument(
        "--snapshot-every",
        type=int,
        default=0,
        help="also take a snapshot every N pushes, as a polling UI would",
    )
    parser.add_argument("--timing-repeats", type=int, default=7)
    args = parser.parse_args()

    gc.collect()
    rss_before = rss_bytes()
    store = MetricStore()
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        store.push(train_record(step))
        if step % args.eval_every == 0:
            store.push(
                {
                    "type": "eval",
                    "step": step,
                    "epoch": step / 234.0,
                    "val_loss": 0.3,
                    "val_acc": 0.9,
                }
            )
            store.push(
                {"type": "event", "level": "info", "message": f"step {step}", "kind": "checkpoint"}
            )
        if args.snapshot_every and step % args.snapshot_every == 0:
            store.snapshot()
        if step % 200_000 == 0:
            note(f"{step:,} pushed, RSS +{(rss_bytes() - rss_before) / MB:.1f} MB")
    push_s = time.perf_counter() - t0
    gc.collect()
    rss_pushed = rss_bytes()

    cold: list[float] = []
    warm: list[float] = []
    for i in range(args.timing_repeats):
        store.push(train_record(args.steps + 1 + i))  # every series changes: a full merge
        t = time.perf_counter()
        snap = store.snapshot()
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        store.snapshot()  # nothing changed: the cached snapshot
        warm.append(time.perf_counter() - t)
    loss = snap.get("loss")
    decimate: list[float] = []
    for _ in range(args.timing_repeats):
        t = time.perf_counter()
        xs, _ys = loss.decimate(80)
        decimate.append(time.perf_counter() - t)
    gc.collect()
    rss_after = rss_bytes()

    growth_mb = (rss_after - rss_before) / MB
    emit(
        {
            "item": "5 metric store memory bound",
            "machine": machine(),
            "command": " ".join(["python bench/store_memory.py", *sys.argv[1:]]),
            "steps": args.steps,
            "series": len(snap.series),
            "points_per_series": {n: len(s) for n, s in sorted(snap.series.items())[:3]},
            "loss_points": len(loss),
            "decimated_points": len(xs),
            "rss_before_mb": round(rss_before / MB, 1),
            "rss_growth_after_pushes_mb": round((rss_pushed - rss_before) / MB, 2),
            "rss_growth_with_snapshots_mb": round(growth_mb, 2),
            "push_us_mean": round(1e6 * push_s / args.steps, 2),
            "snapshot_cold_ms": spread([1e3 * s for s in cold], 3),
            "snapshot_warm_us": spread([1e6 * s for s in warm], 2),
            "decimate80_ms": spread([1e3 * s for s in decimate], 3),
            "goal": "RSS growth < 50 MB",
            "met": growth_mb < 50,
        }
    )


if __name__ == "__main__":
    main()
