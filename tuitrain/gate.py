"""`tuitrain gate BASELINE CANDIDATE`: a CI step that fails when a change made training
slower or worse.

Throughput: the median samples/s over each run's log points after the first `--warmup`
(compile, cold caches), and a 95% bootstrap interval of the ratio candidate / baseline
(2,000 resamples of each run's log points, seeded: the same runs give the same verdict). The
candidate FAILS when the interval's upper end is below 1 - `--max-slowdown`/100: slower by
more than the limit beyond what the log points' own spread explains. Two runs of one config on
a noisy machine pass at the default 10%.

Quality: the primary metric the header declares (accuracy for classification; the task's
otherwise; a script run's `val_loss`), last evaluation of each run. The candidate FAILS when it
is worse by more than `--max-drop` in the metric's units (accuracy in points; default 0.5
point, or the task's parity tolerance, else 1% of the baseline's value). One value per run:
no interval (the records hold no per-item values); say so.

Exit 0: pass; 1: a check failed; 2: a run is missing or unreadable. Prints a markdown table
and appends it to $GITHUB_STEP_SUMMARY when that is set.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuitrain.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.metrics.records import task_declaration

EXIT_GATE_FAIL = 1
RESAMPLES = 2000


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain gate",
        description="Compare a candidate run with a baseline run: exit 1 when it is slower "
        "or worse by more than the limits (noise-aware), 0 otherwise, 2 for a bad run.",
    )
    p.add_argument("baseline", metavar="BASELINE", help="a run dir or its metrics.jsonl")
    p.add_argument("candidate", metavar="CANDIDATE", help="a run dir or its metrics.jsonl")
    p.add_argument(
        "--max-slowdown", type=float, default=10.0, metavar="PCT",
        help="the largest slowdown of median samples/s that passes, in percent (default 10)",
    )  # fmt: skip
    p.add_argument(
        "--max-drop", type=float, metavar="X",
        help="the largest worsening of the primary metric that passes, in its units (points "
        "for accuracy; default 0.5 point, or the task's tolerance, else 1%% of the baseline)",
    )  # fmt: skip
    p.add_argument(
        "--warmup", type=int, default=3, metavar="N",
        help="log points left out at the start of each run (compile, warm-up; default 3)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


@dataclass
class RunFigures:
    path: Path
    rates: list[float] = field(default_factory=list)
    header: dict[str, Any] | None = None
    metric: float | None = None
    metric_key: str | None = None
    status: str | None = None


def metrics_path(target: str) -> Path:
    path = Path(target)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{target}: no run there (no metrics.jsonl); pass a run dir.")
    return path


def read_run(target: str, warmup: int) -> RunFigures:
    from tuitrain.export import Reading

    path = metrics_path(target)
    run = RunFigures(path)
    evals: list[dict[str, Any]] = []
    rates: list[float] = []
    for record in Reading(path):
        kind = record.get("type")
        if kind == "header" and run.header is None:
            run.header = record
        elif kind == "train":
            rate = record.get("samples_per_s")
            if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
                rates.append(float(rate))
        elif kind == "eval":
            evals.append(record)
        elif kind == "end":
            run.status = record.get("status")
    if run.header is None:
        raise UserError(f"{path} holds no header record; it is not a tuitrain run.")
    run.rates = rates[warmup:] if len(rates) > warmup else rates
    task = task_declaration(run.header)
    run.metric_key = task["primary"] or "val_loss"
    for record in reversed(evals):
        value = record.get(run.metric_key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            run.metric = float(value)
            break
    return run


def bootstrap_ratio(base: list[float], cand: list[float], seed: int = 0) -> tuple[float, float]:
    """95% interval of median(cand) / median(base), resampling each run's log points."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(RESAMPLES):
        b = statistics.median(rng.choices(base, k=len(base)))
        c = statistics.median(rng.choices(cand, k=len(cand)))
        ratios.append(c / b)
    ratios.sort()
    return ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]


def judge(base: RunFigures, cand: RunFigures, max_slowdown: float, max_drop: float | None
          ) -> dict[str, Any]:  # fmt: skip
    rows: list[dict[str, Any]] = []
    if len(base.rates) >= 2 and len(cand.rates) >= 2:
        mb, mc = statistics.median(base.rates), statistics.median(cand.rates)
        low, high = bootstrap_ratio(base.rates, cand.rates)
        floor = 1 - max_slowdown / 100
        rows.append({
            "what": "median samples/s", "baseline": mb, "candidate": mc, "ratio": mc / mb,
            "interval": [low, high], "limit": f">= {floor:.2f}x (95% interval's upper end)",
            "verdict": "FAIL" if high < floor else "pass",
        })  # fmt: skip
    else:
        rows.append({"what": "median samples/s", "baseline": None, "candidate": None,
                     "ratio": None, "interval": None, "limit": "", "verdict": "n/a",
                     "why": "fewer than 2 log points with samples/s after warm-up"})  # fmt: skip
    task = task_declaration(base.header)
    key = base.metric_key or "val_loss"
    if base.metric is not None and cand.metric is not None and key == cand.metric_key:
        pct = key == "val_acc"
        scale = 100.0 if pct else 1.0
        worse = (
            (base.metric - cand.metric) if task["mode"] == "max" else (cand.metric - base.metric)
        )
        worse *= scale
        if max_drop is not None:
            limit, source = max_drop, "--max-drop"
        elif pct:
            limit, source = 0.5, "default 0.5 point"
        elif task["tolerance"]:
            limit, source = float(task["tolerance"]), "the task's tolerance"
        else:
            limit, source = 0.01 * abs(base.metric) or 0.01, "default: 1% of the baseline"
        unit = " pt" if pct else ""
        rows.append({
            "what": f"{key} ({task['mode']}, last evaluation)",
            "baseline": base.metric * scale, "candidate": cand.metric * scale,
            "ratio": None, "interval": None,
            "limit": f"worse by <= {limit:g}{unit} ({source})",
            "worse_by": worse, "verdict": "FAIL" if worse > limit + 1e-12 else "pass",
        })  # fmt: skip
    else:
        rows.append({"what": key, "baseline": base.metric, "candidate": cand.metric,
                     "ratio": None, "interval": None, "limit": "", "verdict": "n/a",
                     "why": "no evaluation of it in a run, or the metrics differ"})  # fmt: skip
    failed = any(r["verdict"] == "FAIL" for r in rows)
    return {"verdict": "FAIL" if failed else "PASS", "checks": rows,
            "test": f"throughput: bootstrap 95% interval of the ratio of medians ({RESAMPLES} "
                    "resamples of the log points after warm-up, seed 0); metric: the last "
                    "evaluation of each run, no interval (one value per run)"}  # fmt: skip


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def markdown(result: dict[str, Any], base: RunFigures, cand: RunFigures) -> str:
    lines = [
        f"### tuitrain gate: {result['verdict']}",
        "",
        f"baseline `{base.path.parent}` · candidate `{cand.path.parent}`",
        "",
        "| what | baseline | candidate | ratio | limit | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["checks"]:
        ratio = fmt(row["ratio"])
        if row.get("interval"):
            low, high = row["interval"]
            ratio = f"{row['ratio']:.3f}x [{low:.3f}, {high:.3f}]"
        elif row.get("worse_by") is not None:
            ratio = f"worse by {row['worse_by']:+.4g}"
        lines.append(
            f"| {row['what']} | {fmt(row['baseline'])} | {fmt(row['candidate'])} | {ratio} "
            f"| {row['limit'] or row.get('why', '')} | {row['verdict']} |"
        )
    lines += ["", f"Test: {result['test']}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if not 0 <= args.max_slowdown < 100:
            raise UserError(
                f"--max-slowdown {args.max_slowdown:g} must be a percentage in [0, 100)."
            )
        if args.max_drop is not None and not (math.isfinite(args.max_drop) and args.max_drop >= 0):
            raise UserError(f"--max-drop {args.max_drop:g} must be a number >= 0.")
        if args.warmup < 0:
            raise UserError(f"--warmup {args.warmup} must be >= 0.")
        base = read_run(args.baseline, args.warmup)
        cand = read_run(args.candidate, args.warmup)
    except UserError as exc:
        print(f"tuitrain gate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    result = judge(base, cand, args.max_slowdown, args.max_drop)
    text = markdown(result, base, cand)
    if args.json:
        print(json.dumps(result))
    else:
        print(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as exc:
            print(f"tuitrain gate: cannot append to $GITHUB_STEP_SUMMARY ({exc.strerror}).",
                  file=sys.stderr)  # fmt: skip
    return EXIT_GATE_FAIL if result["verdict"] == "FAIL" else 0
