"""Item 4 diagnosis: does a UI-sized burst of work cost the engine more when it holds the GIL?

    python bench/gil_probe.py --repeats 4 --burst-ms 25 --period-ms 200

The engine trains headless in this process (`tuitrain.engine.runner.run`, default preset on
the CPU, as item 4's bench) while a side thread does, every `--period-ms`, a burst of
`--burst-ms` of CPU work of one of these kinds:

* `none`     - the thread only sleeps (the baseline),
* `python`   - a pure-Python loop: holds the GIL for the whole burst, like Textual rendering,
* `python-switch` - the same with `sys.setswitchinterval(--switch)` (default 0.5 ms, Python's
               is 5 ms), meant to make the engine thread wait less for the GIL after each op,
* `released` - sha256 over 256 KB buffers: a burst as long, with the GIL released.

Bursts are timed by the wall clock; the CPU each side thread really used is reported
(`side_thread_cores`). 12 ms every 200 ms is 6% of one core, about what the app's main thread
used while training at the earlier 5 Hz / 2 Hz refresh (item 4: 0.05-0.065 cores); 25 ms
shows the effect above this machine's noise (BENCHMARKS.md item 4, "Session 3"). Each run is
a fresh process; the kinds are interleaved per repeat (order rotates). If `python` costs
clearly more than `released`, the UI's price on this machine is mostly GIL time taken from the
engine thread, not cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from _common import emit, machine, note, run_json, spread, train_stats

KINDS = ("none", "python", "python-switch", "released")
OVERRIDES = ['train.device="cpu"', "train.eval_every_epoch=false", "data.val_samples=1024"]


def side_thread(kind: str, burst_s: float, period_s: float, stop: threading.Event) -> dict:
    cpu = {"bursts": 0, "cpu_s": 0.0}
    buf = b"x" * (256 * 1024)

    def loop() -> None:
        while not stop.wait(period_s):
            c0, t0 = time.thread_time(), time.perf_counter()
            if kind.startswith("python"):
                x = 0
                while time.perf_counter() - t0 < burst_s:
                    for i in range(200):
                        x += i * i
            elif kind == "released":
                while time.perf_counter() - t0 < burst_s:
                    hashlib.sha256(buf).digest()  # releases the GIL for buffers > 2 KB
            cpu["bursts"] += 1
            cpu["cpu_s"] += time.thread_time() - c0

    threading.Thread(target=loop, name=f"probe-{kind}", daemon=True).start()
    return cpu


def child(
    kind: str, burst_ms: float, period_ms: float, switch_s: float, overrides: list[str]
) -> None:
    from _common import engine_records

    if kind == "python-switch":
        sys.setswitchinterval(switch_s)  # how long a thread waits before forcing a GIL handoff

    stop = threading.Event()
    cpu = side_thread(kind, burst_ms / 1000, period_ms / 1000, stop)
    t0 = time.perf_counter()
    records = engine_records("fashion-mini", overrides)
    wall = time.perf_counter() - t0
    stop.set()
    stats = train_stats(records, skip=1)
    stats["side_cores"] = cpu["cpu_s"] / wall
    print(json.dumps(stats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--burst-ms", type=float, default=12.0)
    parser.add_argument("--period-ms", type=float, default=200.0)
    parser.add_argument("--switch", type=float, default=0.0005, help="python-switch's interval")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--child", choices=KINDS)
    args = parser.parse_args()
    overrides = OVERRIDES + args.overrides
    if args.child:
        child(args.child, args.burst_ms, args.period_ms, args.switch, overrides)
        return
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    for r in range(args.repeats):
        order = KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]
        for kind in order:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind]
            cmd += ["--burst-ms", str(args.burst_ms), "--period-ms", str(args.period_ms)]
            cmd += ["--switch", str(args.switch)]
            for o in args.overrides:
                cmd += ["--set", o]
            res = run_json(cmd)
            runs[kind].append(res)
            note(
                f"repeat {r} {kind}: {res['samples_per_s']:.0f} samples/s, "
                f"side thread {res['side_cores']:.3f} cores"
            )
    ratio = {
        k: spread(
            [
                a["samples_per_s"] / b["samples_per_s"]
                for a, b in zip(runs[k], runs["none"], strict=True)
            ]
        )
        for k in KINDS[1:]
    }
    emit(
        {
            "item": "4 diagnosis: GIL-holding vs GIL-releasing side work during headless training",
            "command": "python " + " ".join(sys.argv),
            "machine": machine(),
            "burst_ms": args.burst_ms,
            "switch_interval_s": args.switch,
            "period_ms": args.period_ms,
            "samples_per_s": {k: spread([x["samples_per_s"] for x in v]) for k, v in runs.items()},
            "side_thread_cores": {k: spread([x["side_cores"] for x in v]) for k, v in runs.items()},
            "ratio_to_none": ratio,
            "python_over_released": spread(
                [
                    a["samples_per_s"] / b["samples_per_s"]
                    for a, b in zip(runs["python"], runs["released"], strict=True)
                ]
            ),
            "median_samples_per_s": {
                k: statistics.median(x["samples_per_s"] for x in v) for k, v in runs.items()
            },
        }
    )


if __name__ == "__main__":
    main()
