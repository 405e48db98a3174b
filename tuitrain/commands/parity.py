"""`tuitrain parity`: the fp32-vs-mixed precision parity check from the command line.

Prints a readable table, or with `--json` one JSON object on stdout (nothing else goes to
stdout). Progress lines go to stderr; every engine record of both runs goes to the run
dir's parity log (lines) and metrics file (tagged with "run"), the result to its parity
file (rundir.layout names them). Imports torch lazily so `tuitrain parity --help` stays
instant.
"""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tuitrain.core.config import DEFAULT_PRESET, Config, load_preset, overrides_from
from tuitrain.core.errors import EXIT_FAILED, OneLineParser, UserError
from tuitrain.metrics.format import format_record
from tuitrain.metrics.records import CLASSIFY_PRIMARY
from tuitrain.metrics.sinks import Sink, console_clock
from tuitrain.rundir.layout import METRICS_NAME, PARITY_JSON, PARITY_LOG, RunDir, parity_run_dir

if TYPE_CHECKING:
    from tuitrain.metrics.parity_report import ParityResult

EXIT_CODES_HELP = """exit codes:
  0    PASS: |fp32 - mixed| validation accuracy <= 0.5 point after the last epoch
  3    FAIL: the gap is above 0.5 point
  1    ERROR: a run failed (NaN loss, out of memory, a bug)
  2    usage, preset or data error
  130  cancelled by SIGINT (Ctrl-C)    143  cancelled by SIGTERM

The gap is fp32 minus mixed accuracy in points (positive: the mixed run is worse); the
verdict uses its absolute value. One test image is worth 100 / test-set size points.
Its noise, from both runs' last evaluations paired image by image: `discordant` (images
only fp32 got right, only mixed got right), an exact McNemar `p_value`, and
`gap_ci95_points`, a paired 95% interval of the gap (Newcombe's hybrid score method);
when the verdict and the noise disagree, `noise_note` says so and what would settle it.
"""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain parity",
        description="Train the preset twice, in fp32 and in mixed precision, with identical "
        "weights, batches and seed; compare validation accuracy per epoch.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET, help="preset name or path to a .toml file")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3)")
    p.add_argument(
        "--mixed",
        choices=["bf16", "fp16"],
        help="mixed precision to test (default: the preset's bf16/fp16, else bf16 where "
        "supported, else fp16 on CUDA)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any preset field (repeatable)",
    )
    p.add_argument("--run-dir", help="run directory (default runs/parity-<preset>-<timestamp>)")
    p.add_argument("--data-dir", help="folder with Fashion-MNIST's IDX files")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--max-steps",
        type=int,
        help="at most N optimizer steps per run: each epoch then uses the first "
        "ceil(N / epochs) batches of training data, and still ends with an evaluation",
    )
    p.add_argument(
        "--control",
        choices=["auto", "on", "off"],
        default="auto",
        help="a third run, fp32 with seed + 1: does mixed precision move the metric more than"
        " changing the seed does? auto (default): only when the verdict is FAIL; on: always"
        " (1.5x the time); off: never",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        help="the largest |gap| of the primary metric that passes, in its units (classify:"
        " accuracy as a fraction, default 0.005 = 0.5 point; other tasks: the task's own,"
        " else 1%% of the fp32 value)",
    )
    p.add_argument(
        "--early-steps",
        type=int,
        default=20,
        help="steps of the early check (per-step train losses compared; 0 = skip)",
    )
    return p


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """The dedicated flags as `section.key=value` overrides (applied after --set)."""
    pairs: list[tuple[str, Any]] = [
        ("train.device", args.device),
        ("train.seed", args.seed),
        ("train.max_steps", args.max_steps),
        ("data.data_dir", args.data_dir),
        ("task.tolerance", args.tolerance),
    ]
    return overrides_from(pairs)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: 0 after --help, 2 on a usage error
        return int(exc.code or 0)
    try:
        if args.epochs < 1:
            raise UserError(f"--epochs {args.epochs} is out of range; it must be >= 1.")
        if args.early_steps < 0:
            raise UserError(f"--early-steps {args.early_steps} is out of range; it must be >= 0.")
        cfg = load_preset(args.preset, [*args.overrides, *flag_overrides(args)])
        return run_parity(cfg, args)
    except UserError as exc:
        print(f"tuitrain parity: error: {exc}", file=sys.stderr)
        return exc.exit_code


def run_parity(cfg: Config, args: argparse.Namespace) -> int:
    from tuitrain.engine.parity import parity, resolve_mixed
    from tuitrain.host.run import RunHost, run_inline
    from tuitrain.metrics.sinks import JsonlSink, to_json_line

    resolve_mixed(cfg, args.mixed)  # bad input fails before a run dir is made

    def outputs(host: RunHost, log: IO[str]) -> list[Sink]:
        assert host.run_dir is not None
        metrics = JsonlSink(RunDir(host.run_dir).metrics)
        return [metrics, TaggedLineSink(log), ProgressSink(sys.stderr)]

    def check(host: RunHost, sink: Sink) -> ParityResult:
        return parity(
            host.cfg, args.epochs, args.mixed, sink=sink, control=host.control,
            run_dir=host.run_dir, early_steps=args.early_steps, with_control=args.control,
        )  # fmt: skip

    host = RunHost(
        cfg,
        run_dir=args.run_dir or cfg.run.run_dir or parity_run_dir(cfg.name),
        log_name=PARITY_LOG,
        outputs=outputs,
        engine=check,
    )
    result: ParityResult = run_inline(
        host, prog="tuitrain parity", verb="cancelled", signums=(signal.SIGINT, signal.SIGTERM)
    )
    run_dir = host.run_dir
    assert run_dir is not None
    if args.json:
        print(to_json_line({**result.to_json(), "run_dir": str(run_dir)}), flush=True)
    else:
        print("\n".join([format_table(result, run_dir), *next_lines(result, args)]), flush=True)
    if result.verdict is None:  # cancelled
        return host.control.exit_code or EXIT_FAILED
    return result.exit_code


# --------------------------------------------------------------------------- output


class TaggedLineSink(Sink):
    """Engine records as human lines, each prefixed with its time and run: `19:02:11 [fp32]
    step 20 | ...`."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, record: Mapping[str, Any]) -> None:
        line = format_record(record)
        if line is None:
            return
        run = record.get("run")
        tag = f"[{run}{' early' if record.get('early') else ''}] " if run else "[parity] "
        self.stream.write(f"{console_clock(record)} {tag}{line}\n")  # when, as --no-ui says
        if record.get("traceback"):  # a bug in a run: the details belong in the log
            self.stream.write(str(record["traceback"]).rstrip() + "\n")
        self.stream.flush()


class ProgressSink(Sink):
    """A few lines while it runs: the parity's phases and each run's evaluations."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.labels = {"fp32": "fp32", "mixed": "mixed", "control": "control"}

    def write(self, record: Mapping[str, Any]) -> None:
        run = self.labels.get(record.get("run", ""), "")
        if record.get("type") == "event" and record.get("kind") == "parity":
            self.labels["mixed"] = record.get("mixed") or self.labels["mixed"]
            text = str(record.get("message"))
        elif record.get("type") == "eval" and not record.get("early"):
            acc, loss = record.get(CLASSIFY_PRIMARY), record.get("val_loss")
            text = f"  {run} run: epoch {record.get('epoch'):g}"
            text += (
                f" {CLASSIFY_PRIMARY} {100 * acc:.2f}% val_loss {loss:.4f}"
                if acc is not None
                else ""
            )
        elif record.get("type") == "event" and record.get("level") == "error":
            text = f"  {run} run: {record.get('message')}"
        else:
            return
        print(f"tuitrain parity: {text}", file=self.stream, flush=True)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}%"


def _num(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def verdict_line(r: ParityResult) -> str:
    if r.metric is not None and r.verdict in ("PASS", "FAIL"):
        m = r.metric
        sign = "<=" if r.verdict == "PASS" else ">"
        worse = "higher" if m.mode == "min" else "lower"
        return (
            f"{r.verdict}: |gap| {abs(m.gap or 0):.4g} {sign} {m.tolerance:g}"
            f" ({m.tolerance_source})"
            f" (gap = fp32 - {r.mixed} {m.name}; {r.mixed} is worse when its {m.name} is {worse})"
        )
    if r.verdict in ("PASS", "FAIL"):
        sign = "<=" if r.verdict == "PASS" else ">"
        return (
            f"{r.verdict}: |gap| {abs(r.gap_points or 0):.2f} {sign} {r.threshold_points} point"
            f" (gap = fp32 - {r.mixed} accuracy; positive: {r.mixed} is worse)"
        )
    return r.summary().removeprefix("parity ")


def format_table(result: ParityResult, run_dir: Path) -> str:
    """The readable report: per-epoch table, throughput, early check, resolution, verdict."""
    r, m = result, result.mixed
    if r.metric is not None:
        return format_metric_table(r, run_dir)
    lines = [
        f"parity {r.preset}: fp32 vs {m} on {r.device}, {_plural(r.epochs, 'epoch')}, "
        f"seed {r.seed}",
        f"{'epoch':>5}  {'fp32 acc':>9}  {m + ' acc':>9}  {'gap (pt)':>8}  "
        f"{'fp32 loss':>9}  {m + ' loss':>9}",
    ]
    for row in r.per_epoch:
        lines.append(
            f"{row.epoch:>5}  {_pct(row.fp32_acc):>9}  {_pct(row.mixed_acc):>9}  "
            f"{_num(row.gap_points, '+.2f'):>8}  {_num(row.fp32_val_loss, '.4f'):>9}  "
            f"{_num(row.mixed_val_loss, '.4f'):>9}"
        )
    lines.append(
        f"throughput   fp32 {_num(r.fp32_samples_per_s, ',.0f')} samples/s, {m} "
        f"{_num(r.mixed_samples_per_s, ',.0f')} samples/s: speedup {_num(r.speedup, '.2f')}x"
    )
    if r.early_steps:
        diff = r.early_max_rel_loss_diff
        lines.append(
            f"early check  largest relative train-loss difference over the first "
            f"{r.early_steps} steps: {_num(None if diff is None else 100 * diff, '.1f')}%"
        )
    if r.test_set_size:
        images = math.floor(r.threshold_points / (r.one_image_points or 1) + 1e-9)
        lines.append(
            f"test set     {r.test_set_size:,} images: one image = {r.one_image_points:.2f}"
            f" point; a PASS allows a net {_plural(images, 'image')}"
        )
    if noise := r.noise_line():
        lines.append(f"noise        {noise}")
    lines.append(f"verdict      {verdict_line(r)}")
    if note := r.noise_note:
        lines.append(f"             {note}")
    if control := r.control_line():
        lines.append(f"control      {control}")
    lines.append(f"run dir      {run_dir} ({PARITY_JSON}, {PARITY_LOG}, {METRICS_NAME})")
    return "\n".join(lines)


def next_lines(r: ParityResult, args: argparse.Namespace) -> list[str]:
    """The next commands that apply to this verdict: a longer check when the noise and the
    verdict disagree, a control run when a FAIL has none, the same check again otherwise."""
    again = ["tuitrain", "parity", "--preset", str(args.preset)]
    if args.mixed:
        again += ["--mixed", args.mixed]
    steps: list[tuple[list[str], str]] = []
    if r.verdict in ("PASS", "FAIL") and r.noise_note:
        steps.append(
            (again + ["--epochs", str(2 * r.epochs)], "settle it: longer runs, a finer verdict")
        )
    if r.verdict == "FAIL" and r.control is None:
        steps.append((again + ["--control", "on"], "how far changing the seed alone moves it"))
    if r.verdict in (None, "ERROR") or not steps:
        steps.append((again + ["--epochs", str(r.epochs)], "the same check again"))
    width = max(len(shlex.join(cmd)) for cmd, _ in steps)
    return ["next"] + [f"  {shlex.join(cmd):<{width}}  # {why}" for cmd, why in steps]


def format_metric_table(r: ParityResult, run_dir: Path) -> str:
    """The report for a task other than classify: its primary metric per epoch."""
    assert r.metric is not None
    mt, m = r.metric, r.mixed
    name = mt.name
    lines = [
        f"parity {r.preset}: fp32 vs {m} on {r.device}, {_plural(r.epochs, 'epoch')}, "
        f"seed {r.seed}, primary metric {name} ({mt.mode})",
        f"{'epoch':>5}  {'fp32':>10}  {m:>10}  {'gap':>10}",
    ]
    for i, (a, b) in enumerate(mt.per_epoch, start=1):
        gap = a - b if a is not None and b is not None else None
        lines.append(f"{i:>5}  {_num(a, '.4f'):>10}  {_num(b, '.4f'):>10}  {_num(gap, '+.4g'):>10}")
    lines.append(
        f"throughput   fp32 {_num(r.fp32_samples_per_s, ',.0f')} samples/s, {m} "
        f"{_num(r.mixed_samples_per_s, ',.0f')} samples/s: speedup {_num(r.speedup, '.2f')}x"
    )
    if mt.ci95 is not None:
        lines.append(
            f"noise        gap 95% CI [{mt.ci95[0]:+.4g}, {mt.ci95[1]:+.4g}] (paired over"
            f" {mt.items:,} validation items, mean difference +- 1.96 sd/sqrt(n))"
        )
    lines.append(f"verdict      {verdict_line(r)}")
    if control := r.control_line():
        lines.append(f"control      {control}")
    lines.append(f"run dir      {run_dir} ({PARITY_JSON}, {PARITY_LOG}, {METRICS_NAME})")
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m tuitrain.commands.parity` before `tuitrain parity` is wired
    sys.exit(main())
