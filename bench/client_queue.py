"""The client's bounded queue (issue #35): a tight loop of `run.log` calls, as fast as Python
goes, with the default queue (MAX_PENDING values; a full queue makes `log` wait for the flush
thread up to FULL_WAIT_S, then drop the row, counted).

    python bench/client_queue.py [--calls 1000000] [--keys 2]

Prints the loop's time and calls/s, the process's peak RSS growth over the loop, the longest
the queue got in values (sampled every 1,000 calls), and the rows that reached metrics.jsonl
plus the rows counted as dropped (they must add up to --calls).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from _common import emit, machine

from tuitrain.client.core import MAX_PENDING, Run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(Path(tmp) / "run")
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        longest = 0
        start = time.perf_counter()
        for i in range(args.calls):
            run.log({f"k{j}": float(i) for j in range(args.keys)})
            if i % 1000 == 0:
                longest = max(longest, run._pending_values)
        loop_s = time.perf_counter() - start
        run.finish()
        finish_s = time.perf_counter() - start - loop_s
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        lines = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").open()]
        trains = sum(1 for r in lines if r["type"] == "train")
        end = lines[-1]
    emit(
        {
            "benchmark": "client_queue",
            "machine": machine(),
            "calls": args.calls,
            "keys_per_call": args.keys,
            "max_pending": MAX_PENDING,
            "loop_s": round(loop_s, 2),
            "calls_per_s": round(args.calls / loop_s),
            "finish_s": round(finish_s, 2),
            "peak_rss_growth_mib": round((rss1 - rss0) / 1024, 1),
            "longest_queue_sampled": longest,
            "rows_written": trains,
            "rows_dropped": end.get("dropped_rows", 0),
            "accounted": trains + end.get("dropped_rows", 0) == args.calls,
        }
    )


if __name__ == "__main__":
    main()
