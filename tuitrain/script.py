"""`tuitrain run [--run-dir DIR] [--no-ui] -- CMD ...`: watch any script that logs through the
client (`tuitrain.init/log`, `tuitrain.wandb`, the Lightning logger, the HF callback).

CMD starts with `TUITRAIN_RUN_DIR` set to the run dir, in its own session (so a terminal's
Ctrl-C reaches tuitrain, which passes it on). Its stdout and stderr, merged, are kept in
RUN_DIR/output.log and shown: in the dashboard's Output pane (never over the dashboard), or
passed through with `--no-ui`, where the records are printed as line logs as they arrive.
The dashboard is `watch`'s over the run's metrics.jsonl.

`q` asks the script to stop (SIGINT; SIGTERM after `--grace-s`; SIGKILL after as long again);
SIGTERM, SIGINT and SIGHUP sent to `tuitrain run` go to the script. `tuitrain run` exits with
the script's exit code (a signal as 128 + N). The run always has an end record: when the
script left none (it never called `finish`, was killed, or never logged at all), tuitrain
writes one naming the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import tuitrain
from tuitrain.errors import EXIT_USAGE, OneLineParser, UserError

GRACE_S = 10.0
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


def script_name(command: Sequence[str]) -> str:
    """`python train.py` -> train; `torchrun ... train.py` -> train; else the program's name."""
    for word in command[1:]:
        if word.endswith(".py"):
            return Path(word).stem
    return Path(command[0]).name or "script"


def alert_rules(items: Sequence[str]) -> dict[str, str]:
    """`--alert RULE=ACTION` items, checked: one sentence for a bad one."""
    from tuitrain.metrics.alerts import RULES

    rules: dict[str, str] = {}
    for item in items:
        rule, _, action = item.partition("=")
        rule, action = rule.strip(), action.strip()
        if rule not in RULES:
            raise UserError(f"--alert {item!r}: no rule {rule!r}; rules: {', '.join(RULES)}.")
        if action not in ("off", "warn", "stop"):
            raise UserError(
                f"--alert {item!r}: the action must be off, warn or stop (a script cannot be"
                " paused or checkpointed from outside)."
            )
        rules[rule] = action
    return rules


class AlertActions:
    """What `tuitrain run` does with the alert events the client writes: a `stop` asks the
    script to stop (for loops that do not poll run.should_stop), `--on-alert` runs."""

    def __init__(self, script: Script, on_alert: str | None, say: Callable[[str], None]) -> None:
        self.script, self.on_alert, self.say = script, on_alert, say
        self.hooks: list[threading.Thread] = []

    def see(self, record: dict[str, Any]) -> None:
        if record.get("type") != "event" or record.get("kind") != "alert":
            return
        if record.get("action") == "stop" and self.script.proc.poll() is None:
            self.say(f"alert {record.get('alert')}: asking the script to stop (SIGINT)")
            self.script.request_stop()
        if self.on_alert:
            payload = json.dumps(record)
            thread = threading.Thread(target=self._hook, args=(payload,), daemon=True)
            thread.start()
            self.hooks.append(thread)

    def _hook(self, payload: str) -> None:
        with contextlib.suppress(Exception):
            subprocess.run(
                self.on_alert or "", shell=True, input=payload, text=True, timeout=60,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip

    def close(self) -> None:
        for thread in self.hooks:
            thread.join(timeout=60)


class Script:
    """The child process, its output pump and the run dir's end record."""

    def __init__(
        self, command: list[str], run_dir: Path, grace_s: float,
        alerts: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.command, self.run_dir, self.grace_s = command, run_dir, grace_s
        self.metrics = run_dir / "metrics.jsonl"
        self.started = time.monotonic()
        self.stop_asked: float | None = None
        self.signal_name: str | None = None
        env = {**os.environ, "TUITRAIN_RUN_DIR": str(run_dir), "PYTHONUNBUFFERED": "1"}
        if alerts:
            env["TUITRAIN_ALERTS"] = json.dumps(alerts)  # the client's rules
        run_dir.mkdir(parents=True, exist_ok=True)
        self.output = open(run_dir / "output.log", "ab", buffering=0)  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            self.output.close()
            raise UserError(
                f"cannot start {command[0]!r} ({exc.strerror or exc}); check the command after --."
            ) from exc
        self.listeners: list[Callable[[str], None]] = []
        self.pump = threading.Thread(target=self._pump, name="tuitrain-output", daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            with contextlib.suppress(OSError):
                self.output.write(raw)
            line = raw.decode("utf-8", "replace").rstrip("\n")
            for listener in list(self.listeners):
                with contextlib.suppress(Exception):
                    listener(line)

    def send(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)  # the script and what it started

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """SIGINT now; SIGTERM and then SIGKILL later if it does not end (see `escalate`)."""
        if self.stop_asked is None:
            self.stop_asked = time.monotonic()
        self.send(signum)

    def escalate(self) -> None:
        """Called now and then while stopping: SIGTERM after the grace, SIGKILL after 2x."""
        if self.stop_asked is None or self.proc.poll() is not None:
            return
        waited = time.monotonic() - self.stop_asked
        if waited > 2 * self.grace_s:
            self.send(signal.SIGKILL)
        elif waited > self.grace_s:
            self.send(signal.SIGTERM)

    def exit_code(self) -> int:
        code = self.proc.returncode
        return 128 - code if code is not None and code < 0 else int(code or 0)

    def finish(self) -> int:
        """After the child ended: the output drained, the end record ensured, the exit code.
        Idempotent."""
        if self.output.closed:
            return self.exit_code()
        self.pump.join(timeout=5)
        self.output.close()
        code = self.exit_code()
        ensure_end(self.metrics, code, self.command, time.monotonic() - self.started)
        return code


def ensure_end(metrics: Path, code: int, command: Sequence[str], elapsed: float) -> None:
    """Append an end record when the script left none (and a header when it wrote nothing)."""
    last = None
    if metrics.exists():
        with contextlib.suppress(OSError), open(metrics, "rb") as f:
            for line in f:
                if line.strip():
                    last = line
    if last is not None:
        with contextlib.suppress(ValueError):
            if json.loads(last).get("type") == "end":
                return
    from tuitrain.metrics.sinks import JsonlSink

    sink = JsonlSink(metrics)
    try:
        if last is None:  # the script never started a run
            sink.write(
                {
                    "type": "header", "preset": script_name(command), "config": {},
                    "tuitrain": tuitrain.__version__, "client": True, "argv": list(command),
                    "time": datetime.now(UTC).isoformat(timespec="seconds"),
                    "task": {"name": "script", "primary": None, "metrics": []},
                }
            )  # fmt: skip
        if code == 0:
            status, reason = "completed", "the script exited with code 0 without an end record"
        elif code > 128:
            name = signal.Signals(code - 128).name if code - 128 in signal.valid_signals() else "?"
            status, reason = "stopped", f"the script was ended by {name} (exit code {code})"
        else:
            status, reason = "failed", f"the script exited with code {code}"
        if last is None:
            reason += "; it logged nothing through tuitrain (call tuitrain.init in it)"
        sink.write(
            {"type": "end", "status": status, "reason": reason, "step": 0,
             "elapsed_s": round(elapsed, 3), "exit_code": code}
        )  # fmt: skip
    finally:
        sink.close()


def default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


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
        from tuitrain.engine.rundir import refuse_if_held

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
    if args.no_ui or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return run_headless(script, args.on_alert)
    return run_dashboard(script, args.on_alert)


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

    out: IO[str] = sys.stdout
    script.listeners.append(lambda line: print(line, file=out, flush=True))
    from tuitrain.proctree import TreeSampler

    undo = forward_signals(script)
    tail = Tail(script.metrics)
    tree, said = TreeSampler(script.proc.pid), time.monotonic()
    actions = AlertActions(script, on_alert, lambda text: print(f"[tuitrain] {text}", file=out))
    tree.sample()  # the CPU share is measured from here
    try:
        while script.proc.poll() is None:
            if time.monotonic() - said >= TREE_EVERY_S:
                said = time.monotonic()
                print(f"[tuitrain] {tree.sample().text()}", file=out, flush=True)
            for record in tail.read():
                actions.see(record)
                if record.get("type") != "header" and (text := format_record(record)):
                    print(f"[tuitrain] {text}", file=out, flush=True)
            script.escalate()
            time.sleep(0.25)
    finally:
        undo()
    code = script.finish()
    for record in tail.read():
        actions.see(record)
        if record.get("type") != "header" and (text := format_record(record)):
            print(f"[tuitrain] {text}", file=out, flush=True)
    actions.close()
    return code


class Tail:
    """New whole lines of a growing JSONL file, as records (bad lines skipped)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rest = path, 0, b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(1 << 20)
        except OSError:
            return []
        self.offset += len(data)
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    out.append(record)
        return out


def run_dashboard(script: Script, on_alert: str | None = None) -> int:
    from tuitrain.ui.script_app import ScriptApp

    undo = forward_signals(script)
    try:
        app = ScriptApp(script, on_alert)
        app.run()
    finally:
        undo()
    if script.proc.poll() is None:  # the app left first (a second q): stop the script too
        script.request_stop(signal.SIGTERM)
        try:
            script.proc.wait(timeout=script.grace_s)
        except subprocess.TimeoutExpired:
            script.send(signal.SIGKILL)
            script.proc.wait()
    return script.finish()
