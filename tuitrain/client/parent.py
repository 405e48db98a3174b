"""The parent side of `tuitrain run -- CMD`: the script as a child process in its own process
group (its output read in bounded chunks, cut into lines, kept whole in its output log), the run
dir it owns (its lock, the files it refuses), the alert actions and hooks, what it left running,
and the end record that says how it ended. `tuitrain/commands/run.py` is the command around it;
`tuitrain/ui/script_app.py` draws it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tuitrain
from tuitrain.core.errors import UserError
from tuitrain.core.safefile import LinkRefused, not_regular, open_nofollow
from tuitrain.metrics.records import end_record, event_record
from tuitrain.rundir.layout import METRICS_NAME, RUN_LOCK_NAME, RunDir
from tuitrain.rundir.lock import RunDirLock
from tuitrain.rundir.manifest import read_manifest, start_manifest
from tuitrain.rundir.read import last_records

GRACE_S = 10.0
HOOK_TIMEOUT_S = 60.0  # an --on-alert hook (and what it started) is killed after this
HOOK_GRACE_S = 5.0  # ... or this long after the script ended, when tuitrain run closes
CHUNK = 64 * 1024  # the script's output is read this much at a time
LINE_CAP = 4096  # bytes of one output line shown (Output pane, --no-ui); the output log keeps all
LOOK_EVERY_S = 1.0  # how often to look for a metrics file the script writes elsewhere
SHOWN_LEFTOVERS = 5  # commands named in the leftover-processes event
TRACK_EVERY_S = 0.5  # how often the script's process tree is looked at (what it started)
# set for the script, one value a `tuitrain run`: its descendants carry it, a helper that left
# the script's process group (a new session, a double fork) too, so the end finds them
RUN_TREE_ENV = "TUITRAIN_RUN_TREE"
BACKLOG = 2000  # output lines kept for a listener that comes after the script started
# a `tuitrain run` started in the background (`&`, nohup) inherits SIGINT/SIGQUIT (SIGHUP)
# ignored: the script gets them back at their defaults, so Ctrl-C, `q` and a stop alert reach it
DEFAULT_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGXFSZ")
    if hasattr(signal, name)
)


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
    script to stop (for loops that do not poll run.should_stop), `--on-alert` runs (in a
    session of its own: a hook that outlives HOOK_TIMEOUT_S is killed with what it started;
    one still running HOOK_GRACE_S after the script ended too, at `close`)."""

    def __init__(self, script: Script, on_alert: str | None, say: Callable[[str], None]) -> None:
        self.script, self.on_alert, self.say = script, on_alert, say
        self.hooks: list[threading.Thread] = []
        self.procs: dict[threading.Thread, subprocess.Popen[str]] = {}  # each hook's process
        self.closing = False

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
        from tuitrain.core.hooks import run_hook  # the engine's on_alert runs through it too

        def started(proc: subprocess.Popen[str]) -> None:
            self.procs[threading.current_thread()] = proc

        why = run_hook(self.on_alert or "", payload, HOOK_TIMEOUT_S, started)
        if why and not self.closing:  # ended by `close`: it says so, once for them all
            with contextlib.suppress(Exception):
                self.say(f"--on-alert failed: {why}")

    def close(self, grace_s: float = HOOK_GRACE_S) -> None:
        """The script has ended: hooks still running get `grace_s`, then they are ended
        (SIGKILL to each one's process group, what it started too), said in one line among
        the script's notes. `tuitrain run` never waits HOOK_TIMEOUT_S for them."""
        deadline = time.monotonic() + grace_s
        for thread in self.hooks:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        left = [thread for thread in self.hooks if thread.is_alive()]
        if not left:
            return
        self.closing = True
        for thread in left:
            proc = self.procs.get(thread)
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 2  # its thread reaps it (a daemon: never waited for)
        for thread in left:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        n = len(left)
        self.script.notes.append(
            f"{n} --on-alert hook{'s' * (n > 1)} still running {grace_s:g} s after the script "
            f"ended: ended (SIGKILL), with everything {'they' if n > 1 else 'it'} started"
        )


class LineCutter:
    """The script's output bytes in, lines for a screen out: `\\n`, `\\r\\n` and a bare `\\r`
    (a progress bar's redraw; a run of them counts once) end a line; an empty line ended by
    a bare `\\r` is no line (a terminal shows nothing for it). A line longer than `cap` bytes
    is cut to its first `cap` bytes plus "… [cut: N bytes]". Never holds more than `cap`."""

    EOL = re.compile(rb"\r*\n|\r+")  # a run of \r is one line end (with a \n after, too)
    CRS = re.compile(rb"\r*(\n)?")

    def __init__(self, cap: int = LINE_CAP) -> None:
        self.cap = cap
        self.held = bytearray()
        self.cut = 0  # bytes of the current line not held
        self.after_cr = False  # the last chunk ended with \r: a \n first in the next is its pair
        self.blank_cr = False  # ... and the line it ended was empty
        self.most_held = 0  # the most bytes ever held (tests check the bound)

    def feed(self, data: bytes) -> list[str]:
        if not data:
            return []
        lines, start = [], 0
        if self.after_cr:  # the last chunk ended with \r: more \r and a \n here belong to it
            pair = self.CRS.match(data)
            assert pair is not None
            start = pair.end()
            if pair.group(1) and self.blank_cr:  # an empty line ended by \r\n after all
                lines.append("")
            if pair.group(1) or start < len(data):
                self.after_cr = self.blank_cr = False
        for match in self.EOL.finditer(data, start):
            self._keep(data, start, match.start())
            bare_cr, empty = match.group()[-1:] == b"\r", not (self.held or self.cut)
            if bare_cr and match.end() == len(data):  # \r\n split between two reads?
                self.after_cr, self.blank_cr = True, empty
            if not (bare_cr and empty):  # a bare \r after nothing shows nothing
                lines.append(self._line())
            start = match.end()
        self._keep(data, start, len(data))
        return lines

    def flush(self) -> list[str]:
        """The last line when the output ended without a line end."""
        return [self._line()] if self.held or self.cut else []

    def _keep(self, data: bytes, start: int, end: int) -> None:
        room = max(self.cap - len(self.held), 0)
        take = min(room, end - start)
        self.held += data[start : start + take]
        self.cut += end - start - take
        self.most_held = max(self.most_held, len(self.held))

    def _line(self) -> str:
        raw, cut = bytes(self.held), self.cut
        self.held.clear()
        self.cut = 0
        if not cut:
            return raw.decode("utf-8", "replace")
        for k in range(4):  # a character the cap split in two is left out whole
            try:
                text = raw[: len(raw) - k].decode("utf-8")
            except UnicodeDecodeError:
                continue
            return f"{text} … [cut: {cut + k} bytes]"
        return f"{raw.decode('utf-8', 'replace')} … [cut: {cut} bytes]"


def _lstat_mode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


def refuse_special(path: Path) -> None:
    """A link, FIFO, device, socket or directory at `path` (a run dir file tuitrain run reads
    or writes) is refused in one sentence (exit 2); nothing there, or a regular file, is fine."""
    mode = _lstat_mode(path)
    if mode is None or stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        raise LinkRefused(
            f"{path} is a symbolic link; tuitrain does not write through links (one planted "
            "in a shared folder could point at any of your files): remove it, or pass "
            "another --run-dir."
        )
    raise not_regular(path, mode, "remove or rename it, or pass another --run-dir")


def end_leftovers(
    pgid: int, grace_s: float, seen: Collection[tuple[int, int]] = (), marker: str = ""
) -> tuple[list[str], list[str]]:
    """End what the script left running once it has exited: the live processes of its process
    group `pgid`, and those outside it (a new session, a double fork): the descendants `seen`
    ((pid, start) each) while it ran, the processes whose environment holds RUN_TREE_ENV=`marker`,
    and what those started. SIGTERM, then SIGKILL after `grace_s`; a pid that names another
    process by now is left alone. Returns the commands of what was left: in the group, outside
    it (Linux: /proc)."""
    from tuitrain.client.proctree import carrying, command_line, group_members, started, tree_pids

    group = group_members(pgid)
    ours = {pid for pid, _ in group}
    found = set(seen) | (carrying(RUN_TREE_ENV, marker) if marker else set())
    outside = {(pid, start) for pid, start in found if pid not in ours and started(pid) == start}
    for pid, _ in list(outside):  # a helper's own children, in a group of its own
        below = {(p, t) for p in tree_pids(pid) if (t := started(p)) is not None}
        outside |= {(p, t) for p, t in below if p not in ours}
    if not group and not outside:
        return [], []
    shown = [command_line(pid) for pid, _ in sorted(outside)]

    def alive() -> set[tuple[int, int]]:
        return {(pid, start) for pid, start in outside if started(pid) == start}

    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)
        for pid, _ in alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (group_members(pgid) or alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_members(pgid) or alive():
        for pid, _ in alive():  # what they started during the grace
            outside |= {(p, t) for p in tree_pids(pid) if (t := started(p)) is not None}
        send(signal.SIGKILL)
    return [command for _, command in group], shown


def default_signals() -> None:
    """In the child between fork and exec (async-signal-safe calls only): the default action
    for the signals a background shell or nohup hands down ignored."""
    for signum in DEFAULT_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


class Script:
    """The child process, its output pump and the run dir's end record. Creating it claims
    the run dir (RUN_LOCK_NAME, held until `finish`), refuses special files where the output log
    and the metrics file go, empties the run manifest, then starts the command.

    The script may write several runs (a k-fold loop, a second `trainer.train()`): the first
    in the run dir, each later one in a folder beside it that the client lists in the run
    dir's manifest (`tuitrain.rundir.manifest`). `runs()` reads it: each new folder is claimed
    like the first (its RUN_LOCK_NAME, until `finish`), and `finish` gives each run an end
    record (`ensure_end`; only the newest takes the exit code over an end of its own)."""

    def __init__(
        self, command: list[str], run_dir: Path, grace_s: float,
        alerts: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.command, self.run_dir, self.grace_s = command, run_dir, grace_s
        self.metrics = RunDir(run_dir).metrics
        self.started = time.monotonic()
        self.stop_asked: float | None = None
        self.signal_name: str | None = None
        self.notes: list[str] = []  # said once the run is over (main prints them)
        self.elsewhere: str | None = None  # a metrics file the script writes instead of ours
        self.leftovers: list[str] = []
        self.outside = 0  # of the leftovers, those outside the script's process group
        self._runs = [run_dir]  # the script's runs, in the order they started
        self._run_locks: list[RunDirLock] = []  # the later runs' RUN_LOCK_NAME, held
        self._runs_lock = threading.Lock()
        self._looked = 0.0
        self._code: int | None = None
        self._finishing = threading.Lock()
        self._out_lock = threading.Lock()
        self.marker = f"{os.getpid()}-{time.time_ns()}"
        self.seen: set[tuple[int, int]] = set()  # (pid, start) of every descendant looked at
        env = {
            **os.environ, "TUITRAIN_RUN_DIR": str(run_dir), "PYTHONUNBUFFERED": "1",
            RUN_TREE_ENV: self.marker,
        }  # fmt: skip
        if alerts:
            env["TUITRAIN_ALERTS"] = json.dumps(alerts)  # the client's rules
        run_dir.mkdir(parents=True, exist_ok=True)
        self._run_lock = claim_run_dir(run_dir)
        try:
            from tuitrain.rundir.lock import refuse_if_held

            refuse_if_held(run_dir)  # a hosted run or a script of its own writing there now
            refuse_special(self.metrics)
            start_manifest(run_dir)  # the runs of this script: none yet
            self.output = open_nofollow(RunDir(run_dir).output_log, "ab", buffering=0)
        except BaseException:
            self._run_lock.release()
            raise
        try:
            self.proc = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=default_signals,
            )  # fmt: skip
        except OSError as exc:
            self.output.close()
            self._run_lock.release()
            raise UserError(
                f"cannot start {command[0]!r} ({exc.strerror or exc}); check the command after --."
            ) from exc
        self.listeners: list[Callable[[str], None]] = []
        self.backlog: deque[str] = deque(maxlen=BACKLOG)
        self.backlog_dropped = 0  # lines the backlog let go before anyone listened
        self._listen_lock = threading.Lock()
        self.cutter = LineCutter()
        self.pump = threading.Thread(target=self._pump, name="tuitrain-output", daemon=True)
        self.pump.start()
        self.tracker = threading.Thread(target=self._track, name="tuitrain-tree", daemon=True)
        self.tracker.start()

    def _track(self) -> None:
        """Every TRACK_EVERY_S while the script runs: each process in its tree remembered (a
        helper in a session of its own is not in its process group; `finish` ends it too)."""
        from tuitrain.client.proctree import started, tree_pids

        while started(self.proc.pid) is not None:
            for pid in tree_pids(self.proc.pid)[1:]:
                if (start := started(pid)) is not None:
                    self.seen.add((pid, start))
            time.sleep(TRACK_EVERY_S)

    def _pump(self) -> None:
        """CHUNK bytes at a time: to output.log as read, then as cut lines to the listeners."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            try:
                data = os.read(fd, CHUNK)
            except OSError:
                break
            if not data:
                break
            self._record(data)
            self._tell(self.cutter.feed(data))
        self._tell(self.cutter.flush())

    def _record(self, data: bytes) -> None:
        with self._out_lock, contextlib.suppress(OSError, ValueError):  # full disk; closed
            view = memoryview(data)
            while view and not self.output.closed:
                written = self.output.write(view)
                if not written:
                    break
                view = view[written:]

    def _tell(self, lines: list[str]) -> None:
        with self._listen_lock:
            if not self.listeners:  # nobody listens yet: kept (bounded) for the first one
                self.backlog_dropped += max(0, len(self.backlog) + len(lines) - BACKLOG)
                self.backlog.extend(lines)
                return
            for line in lines:
                for listener in self.listeners:
                    with contextlib.suppress(Exception):
                        listener(line)

    def listen(
        self, listener: Callable[[str], None], dropped: Callable[[int], None] | None = None
    ) -> None:
        """Have `listener` called with each output line (from the pump thread); the first one
        also gets the lines that came before it (the newest BACKLOG of them), and `dropped`
        is told how many earlier ones it will never get (output.log has them; only when
        some were let go), before the backlog's lines and with no new line in between."""
        with self._listen_lock:
            if not self.listeners:
                count, self.backlog_dropped = self.backlog_dropped, 0
                if count and dropped is not None:
                    with contextlib.suppress(Exception):
                        dropped(count)
                for line in self.backlog:
                    with contextlib.suppress(Exception):
                        listener(line)
                self.backlog.clear()
            self.listeners.append(listener)

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

    def look_elsewhere(self) -> str | None:
        """Called now and then while the script runs: the first time its process tree is seen
        holding a metrics file other than this run's (it passed a run_dir of its own), that
        path; None otherwise."""
        if self.elsewhere is not None or time.monotonic() - self._looked < LOOK_EVERY_S:
            return None
        self._looked = time.monotonic()
        from tuitrain.client.proctree import files_open_named, tree_pids

        held = files_open_named(tree_pids(self.proc.pid), METRICS_NAME)
        # a client lists a later run's folder before it opens its file: read after looking
        ours = {os.path.realpath(RunDir(path).metrics) for path in self.runs()}
        others = sorted(p for p in held if os.path.realpath(p) not in ours)
        if not others:
            return None
        self.elsewhere = others[0]
        return (
            f"the script writes its records to {self.elsewhere}, not to {self.metrics}: it "
            "writes to a run dir of its own, so this view stays empty (tuitrain watch "
            f"{os.path.dirname(self.elsewhere)} shows that run)"
        )

    def runs(self) -> list[Path]:
        """The script's run dirs so far, the first one first (the manifest read again)."""
        with self._runs_lock:
            for path in read_manifest(self.run_dir):
                if path in self._runs:
                    continue
                self._runs.append(path)
                if self._code is not None:
                    continue  # finished: nothing is held any more
                try:
                    self._run_locks.append(claim_run_dir(path))
                except (UserError, OSError) as exc:
                    self.notes.append(f"{path}: {exc}")
            return list(self._runs)

    def statuses(self) -> list[tuple[Path, str]]:
        """Each run dir with how its run ended ("running" without an end record yet)."""
        out = []
        for path in self.runs():
            last, _ = last_records(RunDir(path).metrics)
            status = "running"
            if last is not None and last.get("type") == "end":
                status = f"{last.get('status')}: {str(last.get('reason') or '')[:200]}"
            out.append((path, status))
        return out

    def exit_code(self) -> int:
        code = self.proc.returncode
        return 128 - code if code is not None and code < 0 else int(code or 0)

    def finish(self) -> int:
        """After the child ended: what it left running ended (`end_leftovers`), the output drained,
        the end record ensured, the run dir given back; the exit code. Idempotent and
        thread-safe (a second caller waits for the first)."""
        with self._finishing:
            if self._code is not None:
                return self._code
            self.proc.wait()
            code = self.exit_code()
            self.tracker.join(timeout=5)  # it stops once the script is gone
            group, outside = end_leftovers(self.proc.pid, self.grace_s, set(self.seen), self.marker)
            self.leftovers, self.outside = group + outside, len(outside)
            self.pump.join(timeout=5)
            with self._out_lock:
                self.output.close()
            try:
                runs = self.runs()
                for path in runs:
                    self._write_records(code, path, newest=path == runs[-1])
                if self.leftovers:
                    self.notes.append(leftover_message(self.leftovers, self.grace_s, self.outside))
            finally:
                self._run_lock.release()
                for held in self._run_locks:
                    held.release()
            self._code = code
            return code

    def _write_records(self, code: int, run_dir: Path, newest: bool) -> None:
        """The leftover-processes event (the newest run) and the end record, as the run dir's
        writer: skipped, with a note, when another writer holds it now (the script was not
        its writer)."""
        from tuitrain.rundir.lock import RunDirLock

        metrics = RunDir(run_dir).metrics
        try:
            lock = RunDirLock(run_dir)
        except (UserError, OSError) as exc:
            self.notes.append(f"no end record written to {metrics}: {exc}")
            return
        try:
            ensure_end(metrics, code, self.command, time.monotonic() - self.started,
                       leftovers=self.leftovers if newest else (), outside=self.outside,
                       elsewhere=self.elsewhere if run_dir == self.run_dir else None,
                       signalled=(self.proc.returncode or 0) < 0, grace_s=self.grace_s,
                       newest=newest)  # fmt: skip
        except (UserError, OSError) as exc:
            self.notes.append(f"no end record written to {metrics}: {exc}")
        finally:
            lock.release()


def claim_run_dir(run_dir: Path) -> RunDirLock:
    """The run dir's RUN_LOCK_NAME, locked for this `tuitrain run`'s life by the run lock's
    rules (mode 0600, this user's file, a dead holder's lock replaced); another live
    `tuitrain run` holding it is one sentence (exit 2)."""

    def busy(holder: str) -> str:
        pid = (holder.split() or ["?"])[0]
        return (
            f"run dir {run_dir} is in use by another tuitrain run (pid {pid}); wait for it "
            "to end, or pass another --run-dir."
        )

    return RunDirLock.claim(run_dir, RUN_LOCK_NAME, busy)


def leftover_message(commands: Sequence[str], grace_s: float, outside: int = 0) -> str:
    """One line: how many processes the script left, `outside` of them outside its process
    group, that tuitrain run ended them, and the first commands."""
    n = len(commands)
    shown = "; ".join(commands[:SHOWN_LEFTOVERS]) + (
        f"; and {n - SHOWN_LEFTOVERS} more" if n > SHOWN_LEFTOVERS else ""
    )
    where = "in its process group"
    if outside:
        where = (
            f"({outside} outside its process group: a new session or a double fork)"
            if outside < n
            else "outside its process group (a new session or a double fork)"
        )
    return (
        f"the script left {n} process{'es' * (n > 1)} running {where} when it exited; "
        f"tuitrain run ended them (SIGTERM, SIGKILL after {grace_s:g} s): {shown}"
    )


def ensure_end(
    metrics: Path, code: int, command: Sequence[str], elapsed: float, *,
    leftovers: Sequence[str] = (), elsewhere: str | None = None, signalled: bool = False,
    grace_s: float = GRACE_S, newest: bool = True, outside: int = 0,
) -> None:  # fmt: skip
    """Append an end record when the script left none (and a header when it wrote nothing),
    or a later one when it left "completed" but exited non-zero, or left an exit code it
    could not read (null); a copy of its own end record with the exit code when it ended
    the run itself before the process ended (`wandb.finish()`, `run.finish()`: no exit
    code in it); a warning event first when it left processes behind. The end record names
    the exit code and the last step seen. A run that is not the script's `newest` (a k-fold
    loop's earlier folds) keeps an end record of its own as it is: the exit code, and what
    was left running, are the last run's."""
    last, step = last_records(metrics)
    left_end = last is not None and last.get("type") == "end"
    own = last or {}
    unread = left_end and newest and "exit_code" in own and own["exit_code"] is None
    wrong = left_end and newest and (unread or (code != 0 and own.get("status") == "completed"))
    untold = left_end and newest and not wrong and "exit_code" not in own
    if left_end and not wrong and not untold and not leftovers:
        return
    from tuitrain.metrics.records import header_record
    from tuitrain.metrics.sinks import JsonlSink

    sink = JsonlSink(metrics)
    try:
        if last is None:  # the script never started a run
            sink.write(
                header_record(
                    preset=script_name(command), config={},
                    tuitrain=tuitrain.__version__, client=True, argv=list(command),
                    time=datetime.now(UTC).isoformat(timespec="seconds"),
                    task={"name": "script", "primary": None, "metrics": []},
                )
            )  # fmt: skip
        if leftovers:
            sink.write(
                event_record(
                    leftover_message(leftovers, grace_s, outside), level="warning",
                    kind="leftover_processes", processes=len(leftovers), outside_group=outside,
                    commands=list(leftovers[:SHOWN_LEFTOVERS]),
                )
            )  # fmt: skip
        if untold:  # the script's own verdict stands; the exit code is added
            sink.write(
                end_record(
                    str(own.get("status") or "stopped"), str(own.get("reason") or ""),
                    step if step is not None else 0, carried=own, exit_code=code,
                )
            )  # fmt: skip
            return
        if left_end and not wrong:
            return
        if signalled and code > 128:
            name = signal.Signals(code - 128).name if code - 128 in signal.valid_signals() else "?"
            status, reason = "stopped", f"the script was ended by {name} (exit code {code})"
        elif code == 0 and not newest:  # its writer died (os._exit, a killed worker) early
            status, reason = (
                "failed",
                (
                    "its writer ended without an end record while the script went on (the script"
                    " exited with code 0)"
                ),
            )
        elif code == 0:
            status, reason = (
                "completed",
                "the script exited with code 0" + ("" if unread else " without an end record"),
            )
        else:
            status, reason = "failed", f"the script exited with code {code}"
        carried: dict[str, Any] = {}  # the script's own end record: its totals, repeated
        if wrong:
            assert last is not None
            reason += (
                "; its own end record could not tell the exit code"
                if unread
                else ' after writing an end record that says "completed"'
            )
            carried = last
        elif last is None:
            if elsewhere:
                reason += (
                    f"; it logged to {elsewhere[:300]}, not to this run dir (a writer that "
                    "does not take TUITRAIN_RUN_DIR over a run_dir of its own)"
                )
            else:
                reason += (
                    "; it logged nothing to this run dir through tuitrain (call tuitrain.init "
                    "in it)"
                )
        sink.write(
            end_record(
                status, reason, step if step is not None else 0, carried=carried,
                elapsed_s=round(elapsed, 3), exit_code=code,
            )
        )  # fmt: skip
    finally:
        sink.close()
