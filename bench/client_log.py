"""The logging client's cost (issue #27): one `run.log` call with 5 values, and one flush.

    python bench/client_log.py [--calls 20000] [--repeats 7] [--device cpu|cuda]

`log` with 5 Python floats, and with 5 scalar tensors on --device (kept as they are: no
conversion, no sync); the flush of FLUSH_EVERY (200) such calls: on CUDA one stack and one
non-blocking copy into pinned memory per device, read a flush later; here the flush is timed
with `final=True` (it waits for its own copy), so it is the flush's whole cost. Each figure is
the median of --repeats batches (min-max spread beside it). The flush thread is parked
(flush_s far away) so that the timed calls are the script's side alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from _common import emit, machine, note, spread

from tuitrain.client.core import FLUSH_EVERY, Run


def per_call_us(run: Run, data: dict, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run.log(data)
    elapsed = time.perf_counter() - start
    with run._mutex:
        run._pending.clear()  # not flushed: the next batch starts empty
        run._pending_values = 0
    return elapsed / calls * 1e6


def flush_ms(run: Run, data: dict) -> float:
    for _ in range(FLUSH_EVERY):
        run.log(data)
    start = time.perf_counter()
    run._flush(final=True)
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    device = torch.device(args.device)
    numbers = {f"m{i}": 0.5 + i for i in range(5)}
    tensors = {f"m{i}": torch.tensor(0.5 + i, device=device) for i in range(5)}
    out: dict = {"machine": machine(), "device": str(device), "calls": args.calls,
                 "flush_every": FLUSH_EVERY}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(Path(tmp) / "run", flush_every=10**9, flush_s=3600.0)
        for name, data in (("numbers", numbers), ("tensors", tensors)):
            note(f"log with 5 {name}")
            per_call_us(run, data, 1000)  # warm-up
            calls = [per_call_us(run, data, args.calls) for _ in range(args.repeats)]
            out[f"log_us_5_{name}"] = spread(calls, 2)
            note(f"flush of {FLUSH_EVERY} calls with 5 {name}")
            flush_ms(run, data)  # warm-up
            out[f"flush_ms_{FLUSH_EVERY}x5_{name}"] = spread(
                [flush_ms(run, data) for _ in range(args.repeats)], 3
            )
        run.finish()
    emit(out)


if __name__ == "__main__":
    main()
