"""`tuitrain runs`' terminal table with many runs: the time each key takes.

    python bench/runs_keys.py [--runs 10000] [--repeats 5]

Builds --runs rows (no files: the rows `list_runs` would return), opens the table headless
(Textual's pilot, 140x40), and times each key from the press to the screen drawn after it:
space (mark a run), `s` (sort by the next column), a filter typed and submitted, the filter
cleared, and a key the table itself handles (down). Prints the median and spread per key.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from _common import emit, machine, spread

from tuitrain.commands.runs import RunRow
from tuitrain.ui.runs_app import RunsApp


def rows(count: int) -> list[RunRow]:
    statuses = ["completed", "failed", "running", "crashed", "stopped"]
    return [
        RunRow(run_dir=f"runs/run-{i:05d}", name=f"run-{i:05d}", status=statuses[i % 5],
               preset="fashion-mini", task="classify", steps=i * 10, best=0.8 + i % 97 / 1e3,
               best_metric="val_acc", best_format="pct", samples_per_s=1000.0 + i % 13,
               tokens_per_s=None, duration_s=60.0 + i, started=f"2026-12-04T{i % 24:02d}:00:00")
        for i in range(count)
    ]  # fmt: skip


async def measure(count: int, repeats: int) -> dict[str, list[float]]:
    app = RunsApp(rows(count))
    times: dict[str, list[float]] = {"space": [], "s": [], "filter": [], "clear": [], "down": []}
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()

        async def timed(name: str, *keys: str) -> None:
            start = time.perf_counter()
            await pilot.press(*keys)
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            times[name].append(time.perf_counter() - start)

        for i in range(repeats):
            await timed("space", "space")
            await timed("s", "s")
            await timed("down", "down")
            await pilot.press("slash", *f"run-0{i}")
            await timed("filter", "enter")
            await pilot.press("slash", *["backspace"] * 6)
            await timed("clear", "enter")
    return times


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    times = asyncio.run(measure(args.runs, args.repeats))
    emit({"machine": machine(), "runs": args.runs,
          "key_s": {k: spread(v, 3) for k, v in times.items()}})  # fmt: skip


if __name__ == "__main__":
    main()
