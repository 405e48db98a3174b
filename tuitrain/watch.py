"""`tuitrain watch RUN_DIR|metrics.jsonl`: the dashboard fed from a run's JSONL file.

Follows a live headless run (new lines as they come, a replaced file starts over), replays a
finished one, reads a DDP run through rank 0's file. Keys that need a live engine say so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tuitrain.errors import EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tuitrain watch",
        description="Attach the dashboard to a headless or finished run.",
    )
    p.add_argument("target", help="a run dir or its metrics.jsonl")
    p.add_argument("--poll", type=float, default=0.25, help="seconds between file checks")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tuitrain.metrics import MetricStore
    from tuitrain.metrics.follow import JsonlFollower, resolve_metrics_path

    path = resolve_metrics_path(args.target)
    if not path.parent.is_dir():
        print(
            f"tuitrain watch: error: {args.target} is not a run dir or a metrics.jsonl; "
            "pass the --run-dir of a run.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    store = MetricStore()
    follower = JsonlFollower(path, store, poll_s=args.poll)
    follower.poll()  # a finished run shows at once
    if not path.exists():
        print(f"tuitrain watch: waiting for {path} to appear…", file=sys.stderr)
    follower.start()
    try:
        from tuitrain.ui.app import TuitrainApp

        app = TuitrainApp(store=store)
        app.title = f"tuitrain watch {path}"
        app.run()
    finally:
        follower.stop()
    return 0
