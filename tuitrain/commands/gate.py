"""`tuitrain gate BASELINE CANDIDATE`: a CI step that fails when a change made training
slower or worse.

A run is every segment it resumed (`tuitrain --resume` appends to its file): the gate reads
every record of each (one pass, memory flat) and each run's summary (`rundir.summary`: its
status by the one state rule, segments, duration, best), which the JSON and the table show.

Throughput: the median samples/s over each run's log points after the first `--warmup` of each
segment (compile, cold caches), and a 95% bootstrap interval of the ratio candidate / baseline
(2,000 resamples of each run's log points, seeded: the same runs give the same verdict). The
candidate FAILS when the interval's upper end is below 1 - `--max-slowdown`/100: slower by
more than the limit beyond what the log points' own spread explains. Two runs of one config on
a noisy machine pass at the default 10%.

Quality: the metric the run is judged by (`rundir.summary.judged_metric`: the primary metric
the header declares, accuracy for classification; a script's first evaluation metric other
than its loss, else its loss), last evaluation of each run, by the metric's goal. The candidate
FAILS when it is worse by more than `--max-drop` in the metric's units (a share, declared pct,
in points; default 0.5 point, or the task's parity tolerance for its primary, else 1% of the
baseline's value). The table says the change in words whose sign cannot be misread ("better
by 0.4 pt", "worse by 1.2 pt"), and a share with its unit (85.3%) beside a limit in points.
One value per run: no interval (the records hold no per-item values); say so.

A verdict is never a pass by default: a check that cannot be made fails and the table says
why (fewer than MIN_RATE_POINTS log points with samples/s after the warm-up; no evaluation of
the judged metric, or a last evaluation that is not finite). So does a run that did not end
cleanly: its last segment ended failed or has no end record (crashed, still running, silent),
or its loss became NaN or inf (a "run ended cleanly" row). Runs of different tasks, or of one
task judged by different metrics, are no input to compare: exit 2, one sentence naming both.

The interval costs O(n log n) per run and not per resample: each run's points are sorted
once and each resample's median is drawn from the order statistics' law (`median_draws`).

Exit 0: pass; 1: a check failed or could not be made; 2: a run is missing or unreadable, or
the runs trained different tasks. Prints a markdown table
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

from tuitrain.core.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.metrics.records import EVAL_PREFIX, task_declaration, valid_step
from tuitrain.rundir.ending import figures as run_figures
from tuitrain.rundir.layout import METRICS_NAME
from tuitrain.rundir.summary import Judged, RunSummary, judged_metric, summarize_metrics

EXIT_GATE_FAIL = 1
RESAMPLES = 2000
MIN_RATE_POINTS = 5  # log points after the warm-up for a throughput interval
OK_STATUSES = ("completed", "stopped")  # an end record's status the gate can judge
NO_END = {  # the state rule's statuses of a last segment without an end record
    "running": "it is still running",
    "silent": "nothing written for a while: it may have died",
    "crashed": "it crashed: its process is gone",
}


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain gate",
        description="Compare a candidate run with a baseline run: exit 1 when it is slower "
        "or worse by more than the limits (noise-aware), 0 otherwise, 2 for a bad run.",
    )
    p.add_argument("baseline", metavar="BASELINE", help=f"a run dir or its {METRICS_NAME}")
    p.add_argument("candidate", metavar="CANDIDATE", help=f"a run dir or its {METRICS_NAME}")
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
        help="log points left out at the start of each run and each resumed segment (compile, "
        "warm-up; default 3)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


@dataclass
class RunFigures:
    """One run as the gate judges it: its summary (`rundir.summary.RunSummary`, the one every
    command uses: status, segments, duration, best) and what only the gate reads, from every
    record of every segment it resumed: the throughput log points (each segment's warm-up
    left out), the judged metric's last evaluation, the first non-finite loss."""

    path: Path
    summary: RunSummary
    header: dict[str, Any]  # the last segment's: its task declares what is judged
    judged: Judged | None = None  # the metric it is judged by (rundir.summary.judged_metric)
    rates: list[float] = field(default_factory=list)
    metric: float | None = None  # the last evaluation's value (nan when it is not finite)
    metric_step: int | None = None
    reason: str = ""  # the last segment's end record's reason
    nonfinite_loss: int | None = None  # the first step whose loss was NaN or inf (-1: unknown)
    log_points: int = 0  # train records with samples/s, warm-ups included

    @property
    def task(self) -> dict[str, Any]:
        return task_declaration(self.header)

    @property
    def status(self) -> str:
        """The one state rule's (rundir.state.run_status), over the last segment."""
        return self.summary.status

    @property
    def metric_key(self) -> str | None:
        return self.judged.name if self.judged is not None else None


def metrics_path(target: str) -> Path:
    """The metrics file of an existing run (rundir.read's rule), or UserError (exit 2)."""
    from tuitrain.rundir.read import run_target

    path = run_target(target)
    if not path.is_file():
        raise UserError(f"{target}: no run there (no {METRICS_NAME} file); pass a run dir.")
    return path


def read_run(target: str, warmup: int) -> RunFigures:
    """Every record of the run in `target`, every segment it resumed (one pass, memory flat),
    and its summary."""
    from tuitrain.commands.export import Reading

    path = metrics_path(target)
    summary = summarize_metrics(path)
    if summary is None:
        raise UserError(f"{path} does not start with a header record; it is not a tuitrain run.")
    header: dict[str, Any] = {}
    segment: list[float] = []  # this segment's log points
    rates: list[float] = []
    last_evals: dict[str, dict[str, Any]] = {}  # each evaluation metric's last record
    reason = ""
    nonfinite: int | None = None
    points = 0
    for record in Reading(path):
        kind = record.get("type")
        if kind == "header":
            header, reason = record, ""
            rates += segment[warmup:]  # each segment's warm-up left out (compile, caches)
            segment = []
        elif kind == "train":
            rate = record.get("samples_per_s")
            if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
                segment.append(float(rate))
                points += 1
            loss = record.get("loss")
            if nonfinite is None and isinstance(loss, (int, float)) and not math.isfinite(loss):
                nonfinite = record["step"] if valid_step(record.get("step")) else -1
        elif kind == "eval":
            for name in record:  # a NaN too: a last evaluation that is not finite fails
                if name.startswith(EVAL_PREFIX):
                    last_evals[name] = record
        elif kind == "event":
            if (
                nonfinite is None
                and record.get("kind") == "alert"
                and record.get("alert") == "nonfinite_loss"
            ):
                nonfinite = record["step"] if valid_step(record.get("step")) else -1
        elif kind == "end":
            reason = str(record.get("reason") or "")
    run = RunFigures(path, summary, header, judged_metric(header, last_evals), reason=reason)
    run.rates, run.log_points, run.nonfinite_loss = rates + segment[warmup:], points, nonfinite
    last_eval = last_evals.get(run.metric_key or "")
    if last_eval is not None:
        value = last_eval.get(run.metric_key or "")
        finite = isinstance(value, (int, float)) and math.isfinite(value)
        run.metric = float(value) if finite else math.nan  # type: ignore[arg-type]  # null, NaN, inf
        step = last_eval.get("step")
        run.metric_step = step if valid_step(step) else None
    return run


def same_task(base: RunFigures, cand: RunFigures) -> None:
    """UserError (exit 2) when the runs trained different tasks, or one task judged by
    different primary metrics: nothing to compare. One sentence naming both."""
    a, b = base.task, cand.task
    if a["name"] != b["name"]:
        raise UserError(
            f"the runs trained different tasks: the baseline {a['name']} (primary metric "
            f"{base.metric_key}), the candidate {b['name']} (primary metric "
            f"{cand.metric_key}); gate a candidate against a baseline of its own task."
        )
    if base.metric_key != cand.metric_key:
        raise UserError(
            f"the runs of {a['name']} are judged by different primary metrics: the "
            f"baseline's {base.metric_key}, the candidate's {cand.metric_key}; gate runs "
            "whose headers declare the same primary metric."
        )


def change_words(worse: float, unit: str = "") -> str:
    """A change in words whose sign cannot be misread: `worse by 0.4 pt`, `better by 0.4
    pt`, `no change` (`worse`: how much worse the candidate is, for min and max metrics
    alike)."""
    if abs(worse) < 1e-12:
        return "no change"
    return f"{'worse' if worse > 0 else 'better'} by {abs(worse):.4g}{unit}"


def median_draws(values: Sequence[float], rng: random.Random, count: int) -> list[float]:
    """`count` draws of the median of a bootstrap resample of `values` (n points drawn with
    replacement), without resampling: sorted once, the k-th smallest of n uniform draws
    is floor(n * U_(k)) with U_(k) ~ Beta(k, n + 1 - k), and the next one is U_(k) plus the
    smallest of n - k uniforms above it. The same law as resampling, in O(n log n + count)."""
    xs = sorted(values)
    n = len(xs)
    last = n - 1
    out = []
    for _ in range(count):
        if n % 2:
            k = (n + 1) // 2
            u = rng.betavariate(k, n + 1 - k)
            out.append(xs[min(int(n * u), last)])
        else:
            k = n // 2
            u = rng.betavariate(k, n + 1 - k)
            v = u + (1 - u) * rng.betavariate(1, n - k)
            out.append((xs[min(int(n * u), last)] + xs[min(int(n * v), last)]) / 2)
    return out


def bootstrap_ratio(base: list[float], cand: list[float], seed: int = 0) -> tuple[float, float]:
    """95% interval of median(cand) / median(base), resampling each run's log points."""
    rng = random.Random(seed)
    bs = median_draws(base, rng, RESAMPLES)
    cs = median_draws(cand, rng, RESAMPLES)
    ratios = sorted(c / b for b, c in zip(bs, cs, strict=True))
    return ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]


def health(run: RunFigures) -> str | None:
    """Why the run cannot be judged (it failed, crashed, or its loss blew up), or None."""
    if run.nonfinite_loss is not None:
        where = f" at step {run.nonfinite_loss:,}" if run.nonfinite_loss >= 0 else ""
        return f"the loss became NaN or inf{where}"
    if run.status in NO_END:
        return f"no end record ({NO_END[run.status]})"
    if run.status not in OK_STATUSES:
        return f"it ended {run.status}" + (f" ({run.reason[:80]})" if run.reason else "")
    return None


def not_possible(row: dict[str, Any], why: str) -> dict[str, Any]:
    return {**row, "verdict": "FAIL", "why": f"not possible: {why}"}


def judge(base: RunFigures, cand: RunFigures, max_slowdown: float, max_drop: float | None
          ) -> dict[str, Any]:  # fmt: skip
    rows: list[dict[str, Any]] = []
    floor = 1 - max_slowdown / 100
    throughput = {"what": "median samples/s", "baseline": None, "candidate": None,
                  "ratio": None, "interval": None,
                  "limit": f">= {floor:.2f}x (95% interval's upper end)"}  # fmt: skip
    short = [
        f"the {who} has {len(run.rates)} log point(s) with samples/s after the warm-up of "
        f"{run.log_points - len(run.rates)} (needs {MIN_RATE_POINTS})"
        for who, run in (("baseline", base), ("candidate", cand))
        if len(run.rates) < MIN_RATE_POINTS
    ]
    if short:
        rows.append(not_possible(throughput, "; ".join(short)))
    else:
        mb, mc = statistics.median(base.rates), statistics.median(cand.rates)
        low, high = bootstrap_ratio(base.rates, cand.rates)
        rows.append({
            **throughput, "baseline": mb, "candidate": mc, "ratio": mc / mb,
            "interval": [low, high], "verdict": "FAIL" if high < floor else "pass",
        })  # fmt: skip
    task, judged = base.task, base.judged
    key = judged.name if judged is not None else "an evaluation metric"
    mode = judged.mode if judged is not None else task["mode"]
    # a metric declared as a share (format pct: a classifier's accuracy) is judged in points
    pct = judged is not None and judged.format == "pct"
    scale = 100.0 if pct else 1.0
    quality: dict[str, Any] = {
        "what": f"{key} ({mode}, last evaluation)", "ratio": None, "interval": None,
        "limit": "", "baseline": None, "candidate": None,
    }  # fmt: skip
    for who, run in (("baseline", base), ("candidate", cand)):
        if run.metric is not None and math.isfinite(run.metric):
            quality[who] = run.metric * scale
    missing = [
        f"the {who} has no evaluation" + (f" of {key}" if judged else "") if run.metric is None else
        f"the {who}'s last evaluation of {key}"
        + (f" (step {run.metric_step:,})" if run.metric_step is not None else "")
        + " is not finite"
        for who, run in (("baseline", base), ("candidate", cand))
        if run.metric is None or not math.isfinite(run.metric)
    ]  # fmt: skip
    if missing:
        rows.append(not_possible(quality, "; ".join(missing)))
    else:
        assert base.metric is not None and cand.metric is not None
        worse = (base.metric - cand.metric) if mode == "max" else (cand.metric - base.metric)
        worse *= scale
        if max_drop is not None:
            limit, source = max_drop, "--max-drop"
        elif pct:
            limit, source = 0.5, "default 0.5 point"
        elif task["tolerance"] and key == task["primary"]:
            limit, source = float(task["tolerance"]), "the task's tolerance"
        else:
            limit, source = 0.01 * abs(base.metric) or 0.01, "default: 1% of the baseline"
        unit = " pt" if pct else ""
        rows.append({
            **quality, "limit": f"worse by at most {limit:g}{unit} ({source})",
            "worse_by": worse, "change": change_words(worse, unit), "unit": "%" if pct else "",
            "verdict": "FAIL" if worse > limit + 1e-12 else "pass",
        })  # fmt: skip
    status = {"what": "run ended cleanly", "baseline": base.status, "candidate": cand.status,
              "ratio": None, "interval": None,
              "limit": f"ended {' or '.join(OK_STATUSES)}, finite loss"}  # fmt: skip
    sick = [f"the {who}: {why}" for who, run in (("baseline", base), ("candidate", cand))
            if (why := health(run))]  # fmt: skip
    if sick:
        rows.append({**status, "verdict": "FAIL", "why": "; ".join(sick)})
    else:
        rows.append({**status, "verdict": "pass"})
    failed = any(r["verdict"] == "FAIL" for r in rows)
    return {"verdict": "FAIL" if failed else "PASS", "checks": rows,
            "runs": {"baseline": base.summary.to_json(), "candidate": cand.summary.to_json()},
            "test": f"throughput: bootstrap 95% interval of the ratio of medians ({RESAMPLES} "
                    "resamples of the log points after each segment's warm-up, seed 0); "
                    "metric: the last evaluation of each run, no interval (one value per run); "
                    "a check that cannot be made fails"}  # fmt: skip


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def cell(text: str) -> str:
    """Text from a run (an end record's status or reason) as one markdown table cell."""
    from tuitrain.core.text import strip_controls

    return strip_controls(text, one_line=True).replace("|", "\\|")


def markdown(result: dict[str, Any], base: RunFigures, cand: RunFigures) -> str:
    lines = [
        f"### tuitrain gate: {result['verdict']}",
        "",
        f"baseline `{base.path.parent}` · candidate `{cand.path.parent}`",
        "",
        *(
            f"- {who}: {cell(run_figures(run.summary, {}))}"
            for who, run in (("baseline", base), ("candidate", cand))
        ),
        "",
        "| what | baseline | candidate | change | limit | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["checks"]:
        ratio = fmt(row["ratio"])
        if row.get("interval"):
            low, high = row["interval"]
            ratio = f"{row['ratio']:.3f}x [{low:.3f}, {high:.3f}]"
        elif row.get("change"):
            ratio = row["change"]  # "better by 0.4 pt": never a signed "worse by -0.4"
        limit = row.get("why") or row["limit"]  # a check that failed or was not possible: why
        unit = row.get("unit") or ""  # accuracy in %, beside a limit in points
        baseline, candidate = (
            f"{v:.2f}{unit}" if unit and isinstance(v, float) else fmt(v)
            for v in (row["baseline"], row["candidate"])
        )
        lines.append(
            f"| {row['what']} | {cell(baseline)} | {cell(candidate)} "
            f"| {ratio} | {cell(limit)} | {row['verdict']} |"
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
        same_task(base, cand)
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
