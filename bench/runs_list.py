"""`tuitrain runs` over a folder of many runs (issue #28): the time to list them.

    python bench/runs_list.py [--runs 1000] [--records 2000] [--repeats 5]

Makes --runs run dirs, each a metrics.jsonl of a header, --records train records (the
engine's fields), an eval per 200 and an end record (about 1 MB each at 2,000 records, so
1,000 runs are 1 GB on disk, in a temporary folder), then times `list_runs` (what `tuitrain
runs --json` does before printing) with cold-ish and warm page caches alike: each repeat
reads every run's header and tail again.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import emit, machine, note, spread

from tuitrain.commands.runs import list_runs


def make_runs(folder: Path, runs: int, records: int) -> int:
    header = {"type": "header", "preset": "fashion-mini", "config": {"train": {"epochs": 8}},
              "time": "2026-12-04T00:00:00+00:00"}  # fmt: skip
    total = 0
    for i in range(runs):
        run = folder / f"run-{i:05d}"
        run.mkdir()
        lines = [json.dumps({**header, "time": f"2026-12-04T00:{i % 60:02d}:00+00:00"})]
        for step in range(1, records + 1):
            lines.append(json.dumps({
                "type": "train", "step": step, "epoch": step / 250, "samples": step * 256,
                "loss": 1 / step, "lr": 1e-3, "samples_per_s": 1000.0 + step % 7,
                "step_time_s": 0.25, "data_wait_s": 0.001, "data_wait_frac": 0.004,
                "host_rss_bytes": 900_000_000, "grad_norm": 0.5, "tflops": 0.03,
            }))  # fmt: skip
            if step % 200 == 0:
                lines.append(json.dumps({"type": "eval", "step": step, "val_loss": 0.4,
                                         "val_acc": 0.8 + step / 1e5}))  # fmt: skip
        lines.append(json.dumps({"type": "end", "status": "completed", "reason": "",
                                 "step": records, "elapsed_s": 500.0, "header_at": 0}))  # fmt: skip
        data = "\n".join(lines) + "\n"
        (run / "metrics.jsonl").write_text(data)
        total += len(data)
    return total


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        note(f"writing {args.runs} runs of {args.records} records")
        size = make_runs(folder, args.runs, args.records)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            rows = list_runs(folder)
            times.append(time.perf_counter() - start)
        assert len(rows) == args.runs and rows[0].status == "completed"
    emit({"machine": machine(), "runs": args.runs, "records_per_run": args.records,
          "bytes_on_disk": size, "list_s": spread(times, 3)})  # fmt: skip


if __name__ == "__main__":
    main()
