"""`tuitrain run [--run-dir DIR] [--no-ui] -- CMD ...`: watch any script that logs through the
client (`tuitrain.init/log`, `tuitrain.wandb`, the Lightning logger, the HF callback).

CMD starts with `TUITRAIN_RUN_DIR` set to the run dir, in its own session (so a terminal's
Ctrl-C reaches tuitrain, which passes it on). Its stdout and stderr, merged, are kept in
RUN_DIR/output.log and shown: in the dashboard's Output pane (never over the dashboard), or
passed through with `--no-ui`, where the records are printed as line logs as they arrive.
The dashboard is `watch`'s over the run's metrics file.

`q` asks the script to stop (SIGINT; SIGTERM after `--grace-s`; SIGKILL after as long again);
SIGTERM, SIGINT and SIGHUP sent to `tuitrain run` go to the script. `tuitrain run` exits with
the script's exit code (a signal as 128 + N). The run always has an end record: when the
script left none (it never called `finish`, was killed, or never logged at all), tuitrain
writes one naming the exit code and the last step the records reached; a script that exits
non-zero after an end record saying "completed" gets a later end record saying it failed
(readers take the last one).

A script may write several runs (a k-fold loop, `init` after `finish`, a second HF
`train()`): the first writes the run dir, each later one a fresh `RUN_DIR-2`, `-3` ...
beside it, listed in RUN_DIR/.tuitrain-runs.jsonl (`tuitrain.rundir.manifest`). The dashboard
follows the newest (its event log says which run started where), `--no-ui` prints a line
when one starts and labels the records `run N:`, the last lines list every run dir with how
it ended, and each gets its own end record (a run the script finished keeps its own; the
exit code goes to the newest, and to any run the script left open).

The run dir is `tuitrain run`'s while it lives: it holds RUN_DIR/.tuitrain-run.lock (a second
`tuitrain run` there is refused, even before the script takes the writer lock), opens
output.log without following a link, and refuses a link, FIFO, device, socket or directory
where the output log or the metrics file go. What the script leaves running when it exits, in
its process group or outside it (a new session, a double fork: `end_leftovers`), is ended
(SIGTERM, SIGKILL after the grace) and named in a warning event and a line on stderr.

Output of any size: it is read in chunks of CHUNK bytes and written to output.log as read
(complete, raw); for the screen, `\n`, `\r\n` and `\r` end a line and a line is cut to
LINE_CAP bytes with a marker (never more than that is held for a line).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from tuitrain.client.parent import (
    GRACE_S,
    AlertActions,
    Script,
    alert_rules,
    script_name,
)
from tuitrain.core.errors import EXIT_USAGE, OneLineParser, UserError
from tuitrain.host.stdio import can_draw_ui
from tuitrain.rundir.layout import OUTPUT_LOG, RunDir
from tuitrain.rundir.read import LineTail

TRAIN_LINE_EVERY_S = 5.0  # --no-ui: a script's train records, a line at most this often
TREE_EVERY_S = 30.0  # --no-ui: a line on the script's process tree this often
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tuitrain run",
        description="Run a training script that logs through tuitrain's client and show its "
        "run live: tuitrain run [options] -- python train.py ARGS",
    )
    p.add_argument("--run-dir", help="the run dir (default runs/SCRIPT-TIMESTAMP)")
    p.add_argument("--name", help="the run's name (default: the script's file name)")
    p.add_argument("--no-ui", action="store_true", help="line logs and the script's output")
    p.add_argument(
        "--grace-s",
        type=float,
        default=GRACE_S,
        help=f"seconds between SIGINT and SIGTERM when stopping the script (default {GRACE_S:g})",
    )
    p.add_argument(
        "--alert",
        action="append",
        default=[],
        metavar="RULE=ACTION",
        help="an alert rule's action for the script's run (repeatable): RULE one of "
        "loss_spike, nonfinite_metric, throughput_drop, memory_creep, input_bound, ...; "
        "ACTION off, warn or stop (stop: the client sets run.should_stop, and tuitrain run "
        "asks the script to stop as q does)",
    )
    p.add_argument(
        "--on-alert",
        metavar="CMD",
        help="a shell command run once per alert, the alert as one JSON object on its stdin",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    return p


def default_run_dir(name: str) -> Path:
    """runs/NAME-TIMESTAMP, made now (NAME-TIMESTAMP-2 ... when two start in one second)."""
    from tuitrain.rundir.manifest import default_name, fresh_dir

    return fresh_dir(default_name(name))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        if not command:
            raise UserError("no command to run; put it after --: tuitrain run -- python train.py")
        if not args.grace_s > 0:
            raise UserError(f"--grace-s {args.grace_s:g} must be a positive number of seconds.")
        name = args.name or script_name(command)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(name)
        from tuitrain.rundir.lock import refuse_if_held

        refuse_if_held(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        alerts = alert_rules(args.alert)
        script = Script(command, run_dir, args.grace_s, alerts)
    except UserError as exc:
        print(f"tuitrain run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(
            f"tuitrain run: error: cannot use the run dir ({exc.strerror or exc}).", file=sys.stderr
        )
        return EXIT_USAGE
    print(f"tuitrain run: {' '.join(command)} (run dir {run_dir})", file=sys.stderr)
    if args.no_ui or can_draw_ui():  # the check every command makes before its UI
        code = run_headless(script, args.on_alert)
    else:
        code = run_dashboard(script, args.on_alert)
        from tuitrain.rundir.ending import print_ending

        print_ending(run_dir, "tuitrain run")  # the dashboard is gone: what happened, what next
    for note in script.notes:
        with contextlib.suppress(OSError, ValueError):
            print(f"tuitrain run: {note}", file=sys.stderr, flush=True)
    statuses = script.statuses()
    if len(statuses) > 1:  # a k-fold loop, a second train(): each run, where, how it ended
        lines = [f"tuitrain run: the script wrote {len(statuses)} runs:"]
        lines += [f"  run {n} {path}  {status}" for n, (path, status) in enumerate(statuses, 1)]
        with contextlib.suppress(OSError, ValueError):
            print("\n".join(lines), file=sys.stderr, flush=True)
    return code


def forward_signals(script: Script) -> Callable[[], None]:
    """SIGTERM/SIGINT/SIGHUP to tuitrain run go to the script; returns the undo."""
    previous: dict[int, Any] = {}

    def handler(signum: int, _frame: Any) -> None:
        script.signal_name = signal.Signals(signum).name
        script.request_stop(signum)

    if threading.current_thread() is threading.main_thread():
        for signum in FORWARDED:
            previous[signum] = signal.signal(signum, handler)

    def undo() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return undo


def run_headless(script: Script, on_alert: str | None = None) -> int:
    """The script's output and the run's records as line logs, until the script ends."""
    from tuitrain.metrics.format import format_record
    from tuitrain.metrics.sinks import console_clock

    out: IO[str] = sys.stdout

    def say(text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(f"[tuitrain] {text}", file=out, flush=True)

    script.listen(
        lambda line: print(line, file=out, flush=True),
        lambda early: say(f"{early} earlier lines of the script's output are not shown here; "
                          f"{OUTPUT_LOG} has them"),
    )  # fmt: skip
    from tuitrain.client.proctree import TreeSampler

    undo = forward_signals(script)
    tails = [LineTail(script.metrics)]  # one a run: the script may write several
    tree, said = TreeSampler(script.proc.pid), time.monotonic()
    actions = AlertActions(script, on_alert, say)
    tree.sample()  # the CPU share is measured from here

    cadence: dict[int, TrainCadence] = {}

    def line(n: int, record: dict[str, Any], many: bool) -> None:
        if text := format_record(record):
            text = f"{console_clock(record)} {text}"  # when, as tuitrain --no-ui's lines
            say(f"run {n}: {text}" if many else text)

    def show(n: int, tail: LineTail, many: bool, final: bool = False) -> None:
        pace = cadence.setdefault(n, TrainCadence())
        for record in tail.read():
            actions.see(record)
            if record.get("type") == "header":
                continue
            for shown in pace.take(record):
                line(n, shown, many)
        if final and (last := pace.flush()) is not None:
            line(n, last, many)

    def show_records(final: bool = False) -> None:
        runs = script.runs()  # first: a run listed now has its records in its own file
        for n, tail in enumerate(tails, 1):
            show(n, tail, len(runs) > 1, final)
        for path in runs[len(tails) :]:  # a later run of the script: a line, then its records
            tails.append(LineTail(RunDir(path).metrics))
            say(f"run {len(tails)} started: {path}")
            show(len(tails), tails[-1], True)

    try:
        while script.proc.poll() is None:
            if time.monotonic() - said >= TREE_EVERY_S:
                said = time.monotonic()
                say(tree.sample().text())
            show_records()
            if note := script.look_elsewhere():
                say(note)
            script.escalate()
            time.sleep(0.25)
        code = script.finish()  # signals still go to the script (and its leftovers) meanwhile
    finally:
        undo()
    show_records(final=True)
    actions.close()
    return code


class TrainCadence:
    """Which of a script's records `tuitrain run --no-ui` prints: a train line at most every
    TRAIN_LINE_EVERY_S (the engine's headless runs print one per log interval; a script may
    log every step), the train record before an eval, an event or the end record (so the
    figures beside them are the newest), and every eval, event and end record. All of them
    stay in the run's metrics file; a traceback is not buried under a line per step."""

    def __init__(self, every_s: float = TRAIN_LINE_EVERY_S) -> None:
        self.every_s = every_s
        self.last_shown: float | None = None  # when the last train line was printed
        self.held: dict[str, Any] | None = None  # the newest train record not printed

    def take(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        now = time.monotonic()
        if record.get("type") == "train":
            if self.last_shown is None or now - self.last_shown >= self.every_s:
                self.held, self.last_shown = None, now
                return [record]
            self.held = record
            return []
        held = self.flush()
        return [held, record] if held is not None else [record]

    def flush(self) -> dict[str, Any] | None:
        held, self.held = self.held, None
        if held is not None:
            self.last_shown = time.monotonic()
        return held


def run_dashboard(script: Script, on_alert: str | None = None) -> int:
    from tuitrain.ui.script_app import ScriptApp

    undo = forward_signals(script)
    try:
        app = ScriptApp(script, on_alert)
        app.run()
        if script.proc.poll() is None:  # the app left first (a second q): stop the script too
            script.request_stop(signal.SIGTERM)
            try:
                script.proc.wait(timeout=script.grace_s)
            except subprocess.TimeoutExpired:
                script.send(signal.SIGKILL)
                script.proc.wait()
        code = script.finish()
        app.actions.close()  # hooks still running: a short grace, then ended
        return code
    finally:
        undo()
