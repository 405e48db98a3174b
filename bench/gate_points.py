"""`tuitrain gate` on two long runs: the time of one verdict against the log points.

    python bench/gate_points.py [--points 50000] [--repeats 3]

Writes two runs of --points train records each (samples/s scattered by 8%), an eval and an
end record, then times `tuitrain.commands.gate.main` (reading both files, the bootstrap
interval, the table). Run it with PYTHONPATH pointing at another checkout's tree to time that gate.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import tempfile
import time
from pathlib import Path

from _common import emit, machine, note, spread

from tuitrain.commands.gate import main as gate_main


def make_run(folder: Path, points: int, seed: int) -> Path:
    rng = random.Random(seed)
    folder.mkdir()
    lines = [json.dumps({"type": "header", "preset": "fashion-mini", "config": {}})]
    for step in range(1, points + 1):
        lines.append(json.dumps({"type": "train", "step": step, "loss": 1.0,
                                 "samples_per_s": 1000 * (1 + rng.gauss(0, 0.08))}))  # fmt: skip
    lines.append(json.dumps({"type": "eval", "step": points, "val_loss": 0.4, "val_acc": 0.85}))
    lines.append(json.dumps({"type": "end", "status": "completed", "reason": "", "step": points}))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--points", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        note(f"writing two runs of {args.points} log points")
        a = make_run(Path(tmp) / "a", args.points, 1)
        b = make_run(Path(tmp) / "b", args.points, 2)
        times, codes = [], set()
        for _ in range(args.repeats):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                codes.add(gate_main([str(a), str(b)]))
            times.append(time.perf_counter() - start)
    emit({"machine": machine(), "points": args.points, "exit_codes": sorted(codes),
          "gate_s": spread(times, 3)})  # fmt: skip


if __name__ == "__main__":
    main()
