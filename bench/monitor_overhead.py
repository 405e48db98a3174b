"""Item 3: monitor overhead: headless engine against a bare loop with no metrics at all.

    python bench/monitor_overhead.py --steps 150 --repeats 6 --precision fp32

Both sides train the same run (preset fashion-fp32 with train.precision overridden, same
seed, so the same weights, batches and dropout masks) for --steps steps on the CPU:

* engine: `tuitrain.engine.runner.run` with the headless sinks (JSONL file + console lines,
  here written to /dev/null); timed from its header record (written once the parts are
  built) to its last train record (written after the sync at the final log point).
* bare: the same parts from `tuitrain.engine.setup.build_parts`, batches from the same
  device-resident source, then forward / loss / backward / step / zero_grad / scheduler
  step and nothing else: no loss accumulation, no timers, no NaN check, no records; one
  sync at the end.

Whole runs are timed end to end (not the engine's own samples/s). One discarded warm-up
pair, then --repeats pairs, order alternating. Prints the per-pair ratio engine/bare.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from _common import emit, machine, note, spread
from torch import nn

from tuitrain.core.config import Config, load_preset
from tuitrain.engine.device import synchronize
from tuitrain.engine.runner import run
from tuitrain.engine.setup import DistInfo, build_parts
from tuitrain.metrics.sinks import ConsoleSink, FanOutSink, JsonlSink, Sink


class TimedSink(Sink):
    """Passes records on; notes when the header and the last train record arrive."""

    def __init__(self, inner: Sink, last_step: int) -> None:
        self.inner, self.last_step = inner, last_step
        self.t_start = self.t_end = 0.0

    def write(self, record: Mapping[str, Any]) -> None:
        if record.get("type") == "header":
            self.t_start = time.perf_counter()
        self.inner.write(record)
        if record.get("type") == "train" and record.get("step") == self.last_step:
            self.t_end = time.perf_counter()

    def close(self) -> None:
        self.inner.close()


def engine_seconds(cfg: Config, steps: int, tmp: Path) -> float:
    with open(os.devnull, "w") as devnull:
        inner = FanOutSink(JsonlSink(tmp / "metrics.jsonl"), ConsoleSink(devnull, devnull))
        sink = TimedSink(inner, steps)
        result = run(cfg, sink)
        sink.close()
    if result.status != "completed" or not sink.t_end:
        raise RuntimeError(f"engine run ended {result.status}: {result.reason}")
    return sink.t_end - sink.t_start


def bare_seconds(cfg: Config, steps: int) -> float:
    parts = build_parts(cfg, DistInfo())
    model, optimizer, scheduler = parts.train_model, parts.optimizer, parts.scheduler
    precision, source = parts.precision, parts.data.train
    criterion = nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    done, epoch = 0, 0
    while done < steps:
        for x, y in source.batches(epoch):
            with precision.autocast():
                loss = criterion(model(x), y)
            precision.scale(loss).backward()
            precision.step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            done += 1
            if done == steps:
                break
        epoch += 1
    synchronize(parts.device)  # the one sync
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--preset", default="fashion-fp32")
    args = parser.parse_args()
    cfg = load_preset(
        args.preset,
        [
            f"train.max_steps={args.steps}",
            f'train.precision="{args.precision}"',
            'train.device="cpu"',
            "train.eval_every_epoch=false",
            "data.val_samples=1024",  # the final evaluation is outside the timed window
        ],
    )
    engine_s: list[float] = []
    bare_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tuitrain-bench-") as tmp:
        for r in range(args.repeats + 1):  # pair 0 warms up the process and is dropped
            for side in ("engine", "bare") if r % 2 == 0 else ("bare", "engine"):
                seconds = (
                    engine_seconds(cfg, args.steps, Path(tmp))
                    if side == "engine"
                    else bare_seconds(cfg, args.steps)
                )
                note(f"pair {r} {side}: {seconds:.2f} s ({args.steps * 256 / seconds:.0f}/s)")
                if r:
                    (engine_s if side == "engine" else bare_s).append(seconds)
    samples = args.steps * cfg.data.batch_size
    emit(
        {
            "item": "3 monitor overhead (headless engine vs bare loop, same device-resident data)",
            "machine": machine(),
            "command": " ".join(["python bench/monitor_overhead.py", *sys.argv[1:]]),
            "preset": args.preset,
            "precision": args.precision,
            "steps": args.steps,
            "log_every": cfg.train.log_every,
            "torch_threads": torch.get_num_threads(),
            "engine_samples_per_s": spread([samples / s for s in engine_s], 1),
            "bare_samples_per_s": spread([samples / s for s in bare_s], 1),
            "ratio_engine_over_bare": spread(
                [b / e for e, b in zip(engine_s, bare_s, strict=True)]
            ),
            "goal": "ratio >= 0.97",
        }
    )


if __name__ == "__main__":
    main()
