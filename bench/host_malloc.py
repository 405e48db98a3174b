"""What `train.host_malloc = "retain"` is worth: the engine's step with glibc's defaults and with
retain, each in fresh processes, alternating (issue #40).

    python bench/host_malloc.py --pairs 6 --steps 30 --preset charlm-mini

Each process builds the preset's parts with `train.host_malloc` set (build_parts sets the
process's malloc before anything is allocated), runs --warmup steps of the engine's own
train_step, then times --steps steps one by one: milliseconds a step (median) and minor page
faults a step (median, getrusage). `--thread` runs the steps in a second thread, as the
dashboard's engine does (a thread's glibc arena). The pair's ratio is system's median step time
over retain's. Peak resident memory (ru_maxrss) is reported for each side: what retain keeps.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import threading
import time
from typing import Any

from _common import emit, machine, note, run_json, spread


def child(preset: str, mode: str, warmup: int, steps: int, in_thread: bool) -> dict[str, Any]:
    from tuitrain.core.config import load_preset
    from tuitrain.core.control import Control
    from tuitrain.engine.setup import DistInfo, build_parts
    from tuitrain.engine.trainer import Trainer
    from tuitrain.metrics.sinks import NullSink

    cfg = load_preset(preset, ['train.device="cpu"', f'train.host_malloc="{mode}"'])
    parts = build_parts(cfg, DistInfo())
    trainer = Trainer(cfg, parts, NullSink(), Control(), DistInfo(), None)
    batches = iter(parts.data.train.batches(0))
    out: dict[str, Any] = {"host_malloc": parts.host_malloc}

    def loop() -> None:
        for _ in range(warmup):
            trainer.train_step(batches, need_grad_norm=False)
        times, faults = [], []
        for _ in range(steps):
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            trainer.train_step(batches, need_grad_norm=False)
            times.append(time.perf_counter() - t0)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        out["step_ms"] = 1e3 * statistics.median(times)
        out["faults_per_step"] = statistics.median(faults)

    if in_thread:
        failed: list[BaseException] = []

        def guarded() -> None:
            try:
                loop()
            except BaseException as exc:  # re-raised below, in the process's main thread
                failed.append(exc)

        worker = threading.Thread(target=guarded)
        worker.start()
        worker.join()
        if failed:
            raise failed[0]
    else:
        loop()
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--preset", default="charlm-mini")
    parser.add_argument("--thread", action="store_true", help="steps in a second thread")
    parser.add_argument("--child", choices=["system", "retain"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = child(args.preset, args.child, args.warmup, args.steps, args.thread)
        print(json.dumps(out))
        return
    me = [sys.executable, __file__, "--steps", str(args.steps), "--warmup", str(args.warmup),
          "--preset", args.preset, *(["--thread"] if args.thread else [])]  # fmt: skip
    pairs = []
    for i in range(args.pairs):
        order = ("system", "retain") if i % 2 == 0 else ("retain", "system")
        pair = {mode: run_json([*me, "--child", mode]) for mode in order}
        pair["ratio"] = pair["system"]["step_ms"] / pair["retain"]["step_ms"]
        note(
            f"pair {i}: system {pair['system']['step_ms']:.1f} ms "
            f"({pair['system']['faults_per_step']:.0f} faults), retain "
            f"{pair['retain']['step_ms']:.1f} ms ({pair['retain']['faults_per_step']:.0f}), "
            f"ratio {pair['ratio']:.3f}"
        )
        pairs.append(pair)
    summary: dict[str, Any] = {
        "what": "engine step, glibc defaults / host_malloc=retain, fresh processes",
        "command": " ".join(["python bench/host_malloc.py", *sys.argv[1:]]),
        "machine": machine(),
        "ratio_system_over_retain": spread([p["ratio"] for p in pairs]),
    }
    for mode in ("system", "retain"):
        summary[mode] = {
            key: spread([p[mode][key] for p in pairs], 1)
            for key in ("step_ms", "faults_per_step", "max_rss_mb")
        }
    emit(summary)


if __name__ == "__main__":
    main()
