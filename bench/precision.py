"""Item 2: precision on this CPU: bf16 and fp16 autocast against fp32, through the engine.

    python bench/precision.py --steps 100 --repeats 5 --fp16-steps 20 --fp16-repeats 3

The presets fashion-fp32 / fashion-bf16 / fashion-fp16 (full Fashion-MNIST, the seeds' CNN,
batch 256, AdamW + cosine) differ only in train.precision. Each run is a fresh subprocess
that calls `tuitrain.engine.runner.run` with --steps steps (log every --log-every, the
first interval skipped as warm-up) and evaluates on the full 10k validation set at the end.
Repeat r uses seed r for every precision, so the accuracy gap compares equal runs. A run is
one epoch over the first steps x 256 training samples (so it ends with its evaluation).

fp16 autocast on a CPU without native fp16 convolutions is very slow (the convolutions fall
back to aten::_slow_conv2d), so fp16 runs are shorter (--fp16-steps) and are paired with an
fp32 run of the same length and seed, both evaluated on the first --fp16-val-samples of the
validation set; that accuracy gap is after those few steps only.
Prints a JSON summary: per-pair samples/s ratios and accuracy gaps (median, min-max).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from _common import emit, engine_records, machine, note, run_json, spread, train_stats


def child(precision: str, steps: int, log_every: int, seed: int, val: int) -> dict[str, Any]:
    records = engine_records(
        f"fashion-{precision}",
        [
            # one epoch of exactly `steps` batches: the run ends with its evaluation, on a
            # fixed set of images, however the engine handles train.max_steps mid-epoch
            f"data.train_samples={steps * 256}",
            "train.epochs=1",
            f"train.log_every={log_every}",
            f"train.seed={seed}",
            'train.device="cpu"',
            f"data.val_samples={val}",
        ],
    )
    stats = train_stats(records, skip=1)
    evals = [r for r in records if r["type"] == "eval"]
    stats["val_acc"] = evals[-1]["val_acc"]
    stats["val_loss"] = evals[-1]["val_loss"]
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per fp32/bf16 run")
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fp16-steps", type=int, default=20, help="steps per fp16 run")
    parser.add_argument("--fp16-log-every", type=int, default=10)
    parser.add_argument("--fp16-repeats", type=int, default=3)
    parser.add_argument("--val-samples", type=int, default=0, help="0 = the full 10k")
    parser.add_argument("--fp16-val-samples", type=int, default=2000)
    parser.add_argument("--child", choices=["fp32", "bf16", "fp16"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--val", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.log_every, args.seed, args.val)))
        return

    def measure(precision: str, steps: int, every: int, seed: int, val: int) -> dict[str, Any]:
        flags = {"--child": precision, "--steps": steps, "--log-every": every, "--seed": seed}
        flags["--val"] = val
        cmd = [sys.executable, __file__, *(str(x) for kv in flags.items() for x in kv)]
        out = run_json(cmd, timeout=3600)
        note(
            f"seed {seed} {precision} {steps} steps: {out['samples_per_s']:.0f} samples/s, "
            f"val_acc {out['val_acc']:.4f} on {val or 10000}"
        )
        return out

    pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {"bf16": [], "fp16": []}
    for r in range(args.repeats):
        order = ["fp32", "bf16"] if r % 2 == 0 else ["bf16", "fp32"]
        got = {p: measure(p, args.steps, args.log_every, r, args.val_samples) for p in order}
        pairs["bf16"].append((got["fp32"], got["bf16"]))
        if r < args.fp16_repeats:
            order = ["fp32", "fp16"] if r % 2 == 0 else ["fp16", "fp32"]
            got = {
                p: measure(p, args.fp16_steps, args.fp16_log_every, r, args.fp16_val_samples)
                for p in order
            }
            pairs["fp16"].append((got["fp32"], got["fp16"]))

    summary: dict[str, Any] = {
        "item": "2 precision on this CPU (engine, fashion-* presets)",
        "machine": machine(),
        "command": " ".join(["python bench/precision.py", *sys.argv[1:]]),
        "goal": "bf16 samples/s >= 1.3x fp32; accuracy gap reported",
    }
    for precision, runs in pairs.items():
        steps = args.steps if precision == "bf16" else args.fp16_steps
        summary[precision] = {
            "steps_per_run": steps,
            "val_samples": (args.val_samples if precision == "bf16" else args.fp16_val_samples)
            or 10000,
            "fp32_samples_per_s": spread([a["samples_per_s"] for a, _ in runs], 1),
            f"{precision}_samples_per_s": spread([b["samples_per_s"] for _, b in runs], 1),
            "ratio_over_fp32": spread([b["samples_per_s"] / a["samples_per_s"] for a, b in runs]),
            "fp32_val_acc": spread([a["val_acc"] for a, _ in runs], 4),
            f"{precision}_val_acc": spread([b["val_acc"] for _, b in runs], 4),
            "val_acc_gap_pct_points": spread(
                [100 * (b["val_acc"] - a["val_acc"]) for a, b in runs], 2
            ),
            "data_wait_pct": spread([100 * b["data_wait_frac"] for _, b in runs], 2),
        }
    emit(summary)


if __name__ == "__main__":
    main()
