"""One way to run a run (no Textual here): headless, a rank of a torchrun job, the dashboard's
engine thread and `tuitrain parity` all go through `RunHost`.

A host prepares the run dir once (rank 0; the other ranks receive it) and hands it on: its
`run_dir` is the folder the run writes, the one the dashboard, the ending and the next
commands name (nothing guesses it afterwards). It writes the resolved config,
opens the log, wires the sinks, calls the engine (`tuitrain.engine.runner.run`, or the parity
check), keeps the traceback of a failure in the log, and tells the other ranks what comes next.
It runs inline (`run()`, the caller's thread) or in a thread of its own (`start()`), which it
keeps a handle on, so whoever stops a run can `join()` the real thread (a Textual worker's
`wait()` returns before its thread ends). When a threaded run ends the host calls
`on_end(host)` from the engine thread; the app turns that into a posted message.

Under torchrun the ranks follow rank 0 from run to run. Rank 0's `Leader` broadcasts its run
dir before each run (None: it could not start; everyone exits) and after it the next run's
config (a preset switch from rank 0's UI) or None (everyone exits); the other ranks run
`serve_rank`. torch is imported by the engine, in the run's thread, so a dashboard's first
frame does not wait for it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from tuitrain.core.config import Config
from tuitrain.core.control import Control
from tuitrain.core.errors import EXIT_FAILED
from tuitrain.host.signals import SIGNAL_NAMES, early_signal, stop_if_orphaned, stop_run_on_signals
from tuitrain.host.stdio import native_stderr_to, open_log, write_quietly
from tuitrain.metrics.records import Record, amended_end, end_record, event_record
from tuitrain.metrics.sinks import ConsoleSink, FanOutSink, JsonlSink, Sink, TimelineStoreSink
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.control import remove_stale
from tuitrain.rundir.follow import replay
from tuitrain.rundir.layout import TRAIN_LOG, RunDir, prepare_run_dir, write_resolved_config
from tuitrain.rundir.lock import RunDirLock

if TYPE_CHECKING:
    from tuitrain.engine.setup import DistInfo


Engine = Callable[["RunHost", Sink], Any]  # (host, sink) -> RunResult or ParityResult
Outputs = Callable[["RunHost", IO[str]], Sequence[Sink]]  # (host, log) -> rank 0's sinks


class RunExit(NamedTuple):
    """How a hosted session ended (the dashboard's): its exit code, and the run dir of the
    last run it hosted, as its RunHost made it (a preset switch makes another); None where
    none was made."""

    code: int
    run_dir: Path | None


class NoRun(Exception):
    """Rank 0 could not start the run (it says why on its own output)."""


def train_engine(host: RunHost, sink: Sink) -> Any:
    """The default engine: `tuitrain.engine.runner.run` (imports torch)."""
    from tuitrain.engine.runner import run

    return run(
        host.cfg, sink, host.control, run_dir=host.run_dir, resume=host.resume, dist=host.dist
    )


def log_outputs(host: RunHost, log: IO[str]) -> list[Sink]:
    """The metrics file and the human lines in the log."""
    assert host.run_dir is not None
    return [JsonlSink(RunDir(host.run_dir).metrics), ConsoleSink(log, log)]


class _NotesAfterFirst(Sink):
    """Writes `notes` (events such as a preset switch) right after the run's first record."""

    def __init__(self, inner: Sink, notes: Sequence[Record]) -> None:
        self.inner = inner
        self.notes = list(notes)

    def write(self, record: Record) -> None:
        self.inner.write(record)
        if self.notes:
            notes, self.notes = self.notes, []
            for note in notes:
                self.inner.write(note)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


class _Failover(Sink):
    """The run's sink, ready for the dashboard to fail: once `host.ui_failed()` was called,
    the next record is followed by an error event saying so, records also go to the sinks
    added since (the headless line log), and the end record says the UI failed."""

    def __init__(self, inner: Sink, host: RunHost) -> None:
        self.inner = inner
        self.host = host
        self._told = False

    def write(self, record: Record) -> None:
        failure = self.host.ui_failure
        if failure is not None and record.get("type") == "end":
            record = amended_end(
                record,
                f"{record.get('reason')}; the dashboard failed and the run went on headless",
                ui_failed=failure,
            )
        self.inner.write(record)
        for late in list(self.host.late_sinks):
            late.write(record)
        if failure is not None and not self._told:
            self._told = True
            where = f" (traceback in {self.host.ui_traceback})" if self.host.ui_traceback else ""
            note = event_record(
                f"the dashboard failed: {failure}; training goes on headless{where}",
                level="error",
                kind="ui_failed",
            )
            self.inner.write(note)
            for late in list(self.host.late_sinks):
                late.write(note)

    def flush(self) -> None:
        self.inner.flush()
        for late in list(self.host.late_sinks):
            late.flush()

    def close(self) -> None:
        self.inner.close()
        for late in list(self.host.late_sinks):
            late.close()


class _Serialized(Sink):
    """The run's sink, shared by the engine thread and the control channel's listener:
    one write at a time (the engine's writes are at log points: the lock is uncontended)."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self._lock = threading.Lock()

    def write(self, record: Record) -> None:
        with self._lock:
            self.inner.write(record)

    def flush(self) -> None:
        with self._lock:
            self.inner.flush()

    def close(self) -> None:
        with self._lock:
            self.inner.close()


class Leader:
    """Rank 0 of a torchrun job, speaking for the other ranks (see `serve_rank`)."""

    def __init__(self, info: DistInfo) -> None:
        self.info = info
        self._lock = threading.Lock()
        self._successor: Config | None = None
        self.released = False  # True once told to exit: no later run can use them
        self.run_dir_sent = False

    def send_run_dir(self, run_dir: Path | None) -> None:
        """Before a run: where it writes (None: it could not start, the other ranks exit)."""
        from tuitrain.engine.distributed import broadcast_object

        self.run_dir_sent = True
        if run_dir is None:
            self.released = True
        broadcast_object(None if run_dir is None else str(run_dir), self.info)

    def set_successor(self, cfg: Config) -> bool:
        """Have the other ranks run `cfg` after this run; False when they were already
        released (the run ended and told them to exit), so no new DDP run can start."""
        with self._lock:
            if self.released:
                return False
            self._successor = cfg
            return True

    def after_run(self) -> None:
        """Broadcast the next run's config (a switch) or None (exit) to the other ranks."""
        from tuitrain.engine.distributed import broadcast_object, farewell

        with self._lock:  # decided here; a later switch is refused (set_successor)
            cfg = self._successor
            self.released = cfg is None
        plan = None if cfg is None else {"preset": cfg.name, "config": cfg.to_dict()}
        broadcast_object(plan, self.info)  # outside the lock: the UI never waits on a peer
        if plan is None:
            farewell(self.info)


class RunHost:
    """Owns one run: its config, run dir, control, log, sinks, engine call and result."""

    def __init__(
        self,
        cfg: Config,
        store: MetricStore | None = None,
        *,
        run_dir: Path | str | None = None,
        notes: Sequence[Record] = (),
        on_end: Callable[[RunHost], None] | None = None,
        dist: DistInfo | None = None,
        resume: dict[str, Any] | None = None,
        log_name: str = TRAIN_LOG,
        outputs: Outputs = log_outputs,
        engine: Engine = train_engine,
        steerable: bool = False,
    ) -> None:
        self.cfg = cfg
        self.dist = dist if dist is not None and dist.world_size > 1 else None
        self.leader = Leader(self.dist) if self.dist is not None and self.dist.is_main else None
        self.store = store
        self.control = Control()
        self.requested_run_dir = run_dir
        self.run_dir: Path | None = None  # the run dir made (make_run_dir), once
        self.notes = list(notes)
        self.on_end = on_end
        self.resume = resume
        self.log_name = log_name
        self.outputs = outputs
        self.engine = engine
        self.result: Any = None
        self.thread: threading.Thread | None = None
        self.started_at: float | None = None
        self.ended = threading.Event()
        self.lock: RunDirLock | None = None
        self.ui_failure: str | None = None  # "Type: message" once the dashboard failed
        self.ui_traceback: Path | None = None  # where its traceback was saved
        self.late_sinks: list[Sink] = []  # sinks added while the run goes (headless lines)
        self.steerable = steerable  # listen on RUN_DIR/control/ for tuitrain watch's requests

    @property
    def is_main(self) -> bool:
        return self.dist is None or self.dist.is_main

    # -- inline ------------------------------------------------------------------------
    def make_run_dir(self) -> Path:
        """Rank 0 (or the only process): the run dir made ready (`prepare_run_dir`: made,
        proven writable; a fresh runs/<preset>-<stamp> where none was asked for), once: a
        later call, and `prepare`, hand on the same folder. The dashboard calls it before
        its app starts (native stderr goes there)."""
        if self.run_dir is None:
            self.run_dir = prepare_run_dir(self.cfg, self.requested_run_dir)
        return self.run_dir

    def prepare(self) -> Path:
        """Rank 0 (or the only process) checks a checkpoint to resume from, makes the run dir
        and writes the resolved config; under DDP it sends the run dir to the other ranks,
        which wait for it here."""
        if not self.is_main:
            from tuitrain.engine.distributed import broadcast_object

            assert self.dist is not None
            sent = broadcast_object(None, self.dist)
            if sent is None:
                raise NoRun
            self.run_dir = Path(sent)
            self.lock = RunDirLock(self.run_dir, main=False)
            return self.run_dir
        try:
            if self.resume is not None:  # a refused resume touches nothing in the run dir
                from tuitrain.engine.state import check_resumable

                check_resumable(self.cfg, self.resume)
            run_dir = self.make_run_dir()
            self.lock = RunDirLock(run_dir)  # before anything is written in it
            remove_stale(run_dir)  # a killed run's control dir: no one reads it now
            write_resolved_config(run_dir, self.cfg)
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            if self.leader is not None:
                self.leader.send_run_dir(None)  # the other ranks exit instead of waiting
            raise
        if self.leader is not None:
            self.leader.send_run_dir(run_dir)
        return run_dir

    def run(self) -> Any:
        """Prepare, run the engine to its end, tell the other ranks; the engine's result.
        Other ranks log to rank-N.log, native stderr included (nothing scribbles over rank
        0's UI), and write no metrics file. The run dir is locked for the whole run."""
        try:
            return self._run()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _run(self) -> Any:
        run_dir = self.prepare()
        if self.store is not None and self.resume is not None and self.is_main:
            with contextlib.suppress(OSError):  # the run so far: its charts from its start
                replay(RunDir(run_dir).metrics, self.store)
        rank = self.dist.rank if self.dist is not None else 0
        log_path = run_dir / self.log_name if self.is_main else RunDir(run_dir).rank_log(rank)
        quiet = contextlib.nullcontext() if self.is_main else native_stderr_to(log_path)
        with quiet, open_log(log_path) as log:
            sinks: list[Sink] = []
            if self.store is not None:
                sinks.append(TimelineStoreSink(self.store))
            sinks += self.outputs(self, log) if self.is_main else [ConsoleSink(log, log)]
            if self.is_main and self.cfg.run.tensorboard:
                from tuitrain.engine.tensorboard import TensorBoardSink

                sinks.append(TensorBoardSink(RunDir(run_dir).tensorboard))
            sink: Sink = _Failover(FanOutSink(*sinks), self)
            if self.notes:
                sink = _NotesAfterFirst(sink, self.notes)
            sink = _Serialized(sink)
            listener = None
            if self.is_main and self.steerable:  # tuitrain watch may steer it (host.steer)
                from tuitrain.host.steer import Listener

                listener = Listener(run_dir, self.control, sink.write)
            try:
                result = self.engine(self, sink)
                if getattr(result, "traceback", ""):
                    write_quietly(log, result.traceback)  # the log keeps every traceback
            finally:
                if listener is not None:
                    listener.close()
                sink.close()
            self.result = result
            if self.leader is not None:
                try:
                    self.leader.after_run()
                except Exception as exc:  # noqa: BLE001 - a lost rank: the run already said so
                    self.leader.released = True
                    write_quietly(log, f"could not tell the other ranks what comes next: {exc}\n")
        return result

    def ui_failed(self, failure: str, traceback_path: Path | None, *late: Sink) -> None:
        """The dashboard over this run failed: the run goes on, its records also go to
        `late` (headless lines), an error event and the end record say so."""
        self.ui_traceback = traceback_path
        self.late_sinks.extend(late)
        self.ui_failure = failure

    # -- in a thread ---------------------------------------------------------------------
    def start(self) -> None:
        """Run in a thread of its own (once); `on_end(host)` is called from it at the end."""
        if self.thread is not None:
            raise RuntimeError("this run was already started; make a new RunHost")
        self.thread = threading.Thread(
            target=self._main, name=f"tuitrain-engine[{self.cfg.name}]", daemon=True
        )
        self.started_at = time.monotonic()
        self.thread.start()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 - e.g. an unwritable run dir
            self.result = self._setup_failed(exc)
            if self.leader is not None and not self.leader.run_dir_sent:
                with contextlib.suppress(Exception):  # no run dir: the other ranks exit
                    self.leader.send_run_dir(None)
        finally:
            self.ended.set()
            if self.on_end is not None:
                with contextlib.suppress(Exception):  # the UI may be gone: nothing to tell
                    self.on_end(self)

    def _setup_failed(self, exc: BaseException) -> Any:
        """The run could not even start (run dir, sinks): show it like an engine failure."""
        from tuitrain.engine.runner import RunResult

        message = str(exc) or type(exc).__name__
        code = getattr(exc, "exit_code", EXIT_FAILED)
        if self.store is not None:
            sink = TimelineStoreSink(self.store)
            for note in self.notes:
                sink.write(note)
            sink.write(event_record(message, level="error", kind="failed", hint=""))
            sink.write(end_record("failed", message, step=0))
        self.control.state = "failed"
        return RunResult("failed", message, 0, code, error=exc)

    @property
    def alive(self) -> bool:
        """True while the engine thread runs."""
        return self.thread is not None and self.thread.is_alive()

    def request_stop(self, reason: str) -> None:
        """Ask the engine to stop at the next step boundary (it still writes its end record)."""
        self.control.request_stop(reason)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the engine thread; True when it has ended (or never started)."""
        if self.thread is None:
            return True
        self.thread.join(timeout)
        return not self.thread.is_alive()

    # -- DDP: the other ranks follow this host -------------------------------------------
    @property
    def distributed(self) -> bool:
        return self.dist is not None

    @property
    def peers_released(self) -> bool:
        return self.leader is not None and self.leader.released

    def set_successor(self, cfg: Config) -> bool:
        return self.leader is None or self.leader.set_successor(cfg)

    def can_follow(self) -> bool:
        """True when a next run can start: one process, or the other ranks still wait."""
        return self.leader is None or (self.ended.is_set() and not self.leader.released)


def run_inline(
    host: RunHost,
    *,
    prog: str = "tuitrain",
    verb: str = "stopped",
    signums: Iterable[int] = tuple(SIGNAL_NAMES),
) -> Any:
    """Run `host` in this thread with the stop signals handled (a stop signal noted while
    torch imported becomes a stop at the first step: under DDP every rank must stop at the
    same step); the previous handlers come back afterwards."""
    restore = stop_run_on_signals(host.control, prog=prog, verb=verb, signums=signums)
    unwatch = stop_if_orphaned(host.control)
    if early := early_signal(pop=True):
        name, code = early
        host.control.request_stop(f"{verb} by {name} before training started", exit_code=code)
    try:
        return host.run()
    finally:
        unwatch()
        restore()


def serve_rank(cfg: Config, resume: dict[str, Any] | None, info: DistInfo) -> int:
    """A rank other than 0: run what rank 0 runs, until rank 0 says there is no next run."""
    from tuitrain.core.config import config_from_dict
    from tuitrain.engine.distributed import broadcast_object, farewell

    while True:
        try:
            code = run_inline(RunHost(cfg, dist=info, resume=resume)).exit_code
        except NoRun:
            return EXIT_FAILED
        try:
            plan = broadcast_object(None, info)
        except Exception as exc:  # noqa: BLE001 - rank 0 is gone; the run said what happened
            print(f"tuitrain rank {info.rank}: lost rank 0 after the run: {exc}", file=sys.stderr)
            return code or EXIT_FAILED
        if plan is None:
            farewell(info)
            return code
        cfg, resume = config_from_dict(plan["config"], name=plan["preset"]), None
