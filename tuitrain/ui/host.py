"""EngineHost: one training run in a background thread, fed to a MetricStore the UI polls.

No Textual here. The host makes the run dir (resolved config, metrics.jsonl, train.log),
wires the sinks, owns the `Control` the UI steers the run with, and runs the engine in a
`threading.Thread` it keeps a handle on, so whoever stops a run can `join()` the real thread
(a Textual worker's `wait()` returns before its thread ends). When the run ends the host calls
`on_end(host)` from the engine thread; the app turns that into a posted message.

Under torchrun the host runs rank 0's engine and speaks for the other ranks (see
`tuitrain.launch.serve_rank`): it broadcasts the run dir before the run and, after it, what
the ranks do next: the next preset's config (a switch from the UI) or None (they exit).
torch is imported in the engine thread, not here, so the first frame does not wait for it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuitrain.config import Config
from tuitrain.engine.control import Control
from tuitrain.engine.rundir import prepare_run_dir, write_resolved_config
from tuitrain.errors import EXIT_FAILED
from tuitrain.metrics.sinks import ConsoleSink, FanOutSink, JsonlSink, Sink
from tuitrain.metrics.store import MetricStore

if TYPE_CHECKING:
    from tuitrain.engine.setup import DistInfo
    from tuitrain.engine.trainer import RunResult

Record = Mapping[str, Any]

SEQ_KEY = "_seq"  # arrival order of a record, stamped on the store copy only
_ARRIVALS = itertools.count()  # shared by every sink of the process: always increasing
STEP_KEY = "_step"  # the latest train step when an event arrived


class TimelineStoreSink(Sink):
    """Feeds the store like `StoreSink`, stamping events and evals with arrival order.

    The stamps (`_seq`, `_step`) let the event log interleave events and epoch summaries in
    the order they happened and say at which step. Only the store's copy is stamped; the
    JSONL file and the console see the records unchanged.
    """

    def __init__(self, store: MetricStore) -> None:
        self.store = store
        self._step: Any = None

    def write(self, record: Record) -> None:
        kind = record.get("type")
        if kind == "train":
            self._step = record.get("step")
            self.store.push(record)
            return
        if kind in ("event", "eval"):
            step = record.get("step")
            if step is None:
                step = self._step
            elif kind == "eval":
                self._step = step  # the step the run has reached, for the events after it
            record = {**record, SEQ_KEY: next(_ARRIVALS), STEP_KEY: step}
        self.store.push(record)


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


def ui_event(message: str, level: str = "info", kind: str | None = None, **extra: Any) -> dict:
    """An `event` record in the metric contract's shape."""
    return {"type": "event", "level": level, "message": message, "kind": kind, **extra}


def sibling_run_dir(previous: Path | None, preset: str) -> Path | None:
    """A fresh run dir next to `previous` (runs/<preset>-<stamp>), never an existing one."""
    if previous is None:
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = previous.parent / f"{preset}-{stamp}"
    path = base
    for n in itertools.count(2):
        if not path.exists():
            return path
        path = base.with_name(f"{base.name}-{n}")
    return path  # unreachable; keeps type checkers calm


class EngineHost:
    """Owns one run: its config, run dir, control, engine thread and result."""

    def __init__(
        self,
        cfg: Config,
        store: MetricStore,
        *,
        run_dir: Path | None = None,
        notes: Sequence[Record] = (),
        on_end: Callable[[EngineHost], None] | None = None,
        dist: DistInfo | None = None,
    ) -> None:
        self.cfg = cfg
        self.dist = dist if dist is not None and dist.world_size > 1 else None
        self.store = store
        self.control = Control()
        self.requested_run_dir = run_dir
        self.run_dir: Path | None = None
        self.notes = list(notes)
        self.on_end = on_end
        self.result: RunResult | None = None
        self.thread: threading.Thread | None = None
        self.started_at: float | None = None
        self.ended = threading.Event()
        # DDP: what the other ranks are told when this run ends (guarded by _peers_lock)
        self._peers_lock = threading.Lock()
        self._successor: Config | None = None
        self.peers_released = False  # True once told to exit: no later run can use them
        self._run_dir_sent = False

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread (once)."""
        if self.thread is not None:
            raise RuntimeError("this run was already started; make a new EngineHost")
        self.thread = threading.Thread(
            target=self._main, name=f"tuitrain-engine[{self.cfg.name}]", daemon=True
        )
        self.started_at = time.monotonic()
        self.thread.start()

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

    # -- DDP: the other ranks follow this host ------------------------------------------
    @property
    def distributed(self) -> bool:
        return self.dist is not None

    def set_successor(self, cfg: Config) -> bool:
        """Have the other ranks run `cfg` after this run; False when they were already
        released (this run ended and told them to exit), so no new DDP run can start."""
        with self._peers_lock:
            if self.peers_released:
                return False
            self._successor = cfg
            return True

    def can_follow(self) -> bool:
        """True when a next run can start: one process, or the other ranks still wait."""
        return self.dist is None or (self.ended.is_set() and not self.peers_released)

    def _tell_peers(self) -> None:
        """Broadcast the next run's config (a switch) or None (exit) to the other ranks."""
        from tuitrain.engine.distributed import broadcast_object, farewell

        with self._peers_lock:  # decided here; a later switch is refused (set_successor)
            cfg = self._successor
            self.peers_released = cfg is None
        plan = None if cfg is None else {"preset": cfg.name, "config": cfg.to_dict()}
        broadcast_object(plan, self.dist)  # outside the lock: the UI never waits on a peer
        if plan is None:
            farewell(self.dist)

    def _send_run_dir(self, run_dir: Path | None) -> None:
        from tuitrain.engine.distributed import broadcast_object

        self._run_dir_sent = True
        broadcast_object(None if run_dir is None else str(run_dir), self.dist)

    # -- the engine thread ---------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.result = self._run()
        except BaseException as exc:  # noqa: BLE001 - e.g. an unwritable run dir
            self.result = self._setup_failed(exc)
            if self.dist is not None and not self._run_dir_sent:
                with contextlib.suppress(Exception):  # no run dir: the other ranks exit
                    self.peers_released = True
                    self._send_run_dir(None)
        finally:
            self.ended.set()
            if self.on_end is not None:
                with contextlib.suppress(Exception):  # the UI may be gone: nothing to tell
                    self.on_end(self)

    def _run(self) -> RunResult:
        from tuitrain.engine.trainer import run  # imports torch: in this thread, not the UI's

        run_dir = prepare_run_dir(self.cfg, self.requested_run_dir)
        write_resolved_config(run_dir, self.cfg)
        self.run_dir = run_dir
        if self.dist is not None:
            self._send_run_dir(run_dir)
        with open(run_dir / "train.log", "a", encoding="utf-8") as log:
            sinks = FanOutSink(
                TimelineStoreSink(self.store),
                JsonlSink(run_dir / "metrics.jsonl"),
                ConsoleSink(log, log),
            )
            sink = _NotesAfterFirst(sinks, self.notes)
            try:
                result = run(self.cfg, sink, self.control, run_dir=run_dir, dist=self.dist)
                if result.traceback:
                    log.write(result.traceback)
            finally:
                sink.close()
            if self.dist is not None:
                try:
                    self._tell_peers()
                except Exception as exc:  # noqa: BLE001 - a lost rank: the run already said so
                    self.peers_released = True
                    log.write(f"could not tell the other ranks what comes next: {exc}\n")
        return result

    def _setup_failed(self, exc: BaseException) -> RunResult:
        """The run could not even start (run dir, sinks): show it like an engine failure."""
        from tuitrain.engine.trainer import RunResult

        message = str(exc) or type(exc).__name__
        code = getattr(exc, "exit_code", EXIT_FAILED)
        sink = TimelineStoreSink(self.store)
        for note in self.notes:
            sink.write(note)
        sink.write(ui_event(message, level="error", kind="failed", hint=""))
        sink.write({"type": "end", "status": "failed", "reason": message, "step": 0})
        self.control.state = "failed"
        return RunResult("failed", message, 0, code, error=exc)
