"""The logging client: any training script writes a tuitrain run.

    import tuitrain
    run = tuitrain.init(config={"lr": 3e-4})          # or: with tuitrain.init() as run:
    for step, batch in enumerate(loader):
        loss = train_step(batch)
        run.log({"loss": loss, "grad_norm": norm})   # tensors stay on the device
        if run.should_stop:                            # an alert whose action is stop
            break
    run.finish()

`log` never makes the host wait for the device: it appends the values (numbers or scalar
tensors on any device) to a list under a lock, and a flush thread, every `flush_every` calls
or `flush_s` seconds, stacks each device's tensors into one, copies it into pinned host memory
with one non-blocking transfer, records a CUDA event, and reads the values a flush later
(when the event has completed; `finish` waits for the last one). The records are the metric
contract of a hosted run: a header, train and eval records (`val/…`, `eval/…`, `val_…` and
`eval_…` keys are evaluation metrics and become `val_<name>`; `loss` or `train/loss` is the
loss; `lr` or `learning_rate` the learning rate; `epoch` the epoch; anything else is one of
the script's own metrics, under its own name), events, and an end record written by
`finish`, by an exception (its type and message), by SIGTERM or SIGINT, and at interpreter
exit without `finish`.

Steps follow wandb's and trackio's rule: without `step`, each call is the next step; an
explicit step moves the counter forward. Each run has a folder of its own (`rundir.manifest`):
`TUITRAIN_RUN_DIR` (set by `tuitrain run -- CMD`) for the script's first run and a fresh
`<it>-2`, `-3` ... for each later one, else the argument (a fresh sibling when this process
wrote a run there already), else a fresh `runs/<name>-<timestamp>` (`-2` ... when two start
in the same second); the same one-writer lock as a hosted run.

At each flush the flush thread also samples what a script rarely logs (host RSS, the CUDA
allocator's figures, NVML utilisation and device memory: `tuitrain.engine.telemetry`) into
the newest train record, and judges the train records with the alert rules; an alert whose
action is `stop` sets `run.should_stop`.

What it promises (docs/reliability.md): every logged row reaches the file or is counted as
dropped (`dropped_rows` in the end record, a warning event at the flush). The queue holds at
most MAX_PENDING values (a row counts its keys); a `log` that finds it full wakes the flush
thread and waits up to
FULL_WAIT_S for room (a loop that logs faster than rows can be written is slowed, not
grown), then drops that row, counted. One value that cannot be read (a sharded DTensor, a
complex or many-element tensor, text) costs that value only, said once per key. A key
named like a contract field (`type`, `step`, `mfu` ...) is kept as `user/<key>`. A process
forked from the script never writes to its parent's run. `finish` undoes what `init` did
(the exit hook, the excepthook and `sys.exit` wrappers, the signal handlers).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import operator
import os
import platform
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import tuitrain
from tuitrain.client import ranks
from tuitrain.client.collectives import CollectiveClock
from tuitrain.client.hostinfo import host_rss_bytes
from tuitrain.core.errors import UserError
from tuitrain.metrics.alerts import BUSY_SCRIPT, AlertRules
from tuitrain.metrics.records import (
    EVAL_PREFIX,
    MAX_ALIASES,
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    STEP_MAX,
    add_rank_lists,
    add_telemetry,
    alert_event,
    end_record,
    eval_record,
    event_record,
    header_record,
    names_event,
    plain_number,
    script_alert_event,
    script_train_record,
    user_field,
    valid_step,
)
from tuitrain.rundir import manifest
from tuitrain.rundir.layout import RunDir

__all__ = ["Run", "finish", "init", "log", "current"]

FLUSH_EVERY = 200  # log calls between flushes (also every FLUSH_S seconds)
FLUSH_S = 1.0
EVAL_PREFIXES = ("val/", "eval/", "validation/", "val_", "eval_")
LOSS_KEYS = ("loss", "train/loss", "train_loss")
LR_KEYS = ("lr", "learning_rate", "train/lr", "train/learning_rate")
EPOCH_KEYS = ("epoch", "train/epoch")
GRAD_NORM_KEYS = ("grad_norm", "train/grad_norm")  # the global norm before clipping (HF's too)
MAX_PENDING = 131_072  # values waiting for the flush thread; a full queue makes log() wait
FULL_WAIT_S = 5.0  # how long log() waits for room before dropping its row (counted)
FINISH_WAIT_S = 60.0  # how long finish() waits for a flush still converting
MAX_KEY_CHARS = 256  # a longer key is not a metric name: its value is dropped (said once)
META_KEYWORDS = ("project", "entity", "tags", "notes", "group", "job_type")
IGNORED_INIT_KEYWORDS = (  # wandb's and trackio's init keywords that mean nothing here
    "dir", "id", "resume", "reinit", "mode", "settings", "anonymous", "save_code", "force",
    "config_exclude_keys", "config_include_keys", "allow_val_change", "sync_tensorboard",
    "monitor_gym", "magic", "resume_from", "fork_from", "space_id", "dataset_id", "private",
    "embed", "auto_log_gpu",
)  # fmt: skip
CLIENT_ALERT_ACTIONS = ("off", "warn", "stop")  # what acting on a script can mean
SCRIPT_TASK: dict[str, Any] = {
    "name": "script",
    "primary": None,
    "mode": "min",
    "tolerance": None,
    "tokens": False,
    "metrics": [],  # a script declares none up front: readers chart every series it logs
}

_current: Run | None = None
_other: OtherRankRun | None = None  # init's run on a rank other than 0 (writes nothing)
_forks = 0  # forks this process descends from: a run is written by the process it began in


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


def current() -> Run | None:
    """The run `init` started in this process (None before it and after `finish`)."""
    return _current


def init(
    run_dir: str | os.PathLike[str] | None = None,
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    **options: Any,
) -> Run:
    """Start a run (finishing one this process left open). See `Run` for the options;
    wandb's and trackio's `project`, `entity`, `tags`, `notes`, `group`, `job_type` are kept
    as the run's metadata, their other keywords (IGNORED_INIT_KEYWORDS) are accepted."""
    global _current
    if run_dir is None and options.get("dir") is not None:
        run_dir = options["dir"]
    for key in IGNORED_INIT_KEYWORDS:
        options.pop(key, None)
    if _current is not None and not _current.finished:
        _current.finish()
    global _other
    rank = other_rank()
    job = ranks.next_job_key()  # every rank's n-th run: the same key (None: one process)
    pointer = ranks.pointer_path(run_dir, name or script_name(), job) if job else None
    if rank is not None:  # rank 0 writes the run; the job never dies of a second writer
        if _other is not None:
            _other.finish()
        _other = OtherRankRun(rank, config, name, pointer)
        return _other  # type: ignore[return-value]
    _current = Run(run_dir, config, name, **options)
    if pointer is not None:
        _current._gather_ranks(pointer)
    return _current


def other_rank() -> int | None:
    """This process's rank when it is a rank other than 0 of a distributed job (torchrun's
    RANK), else None."""
    try:
        rank = int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return None
    return rank if rank > 0 else None


class OtherRankRun:
    """What `init` returns on ranks other than 0 of a torchrun job (every rank calling
    `tuitrain.init`/`log` is the naive port of a one-process script): the run's calls are
    accepted and no run is written, so rank 0's run is the job's one run and no rank takes
    the run dir's lock from it (which ended the user's job). The rank's step time and memory
    reach rank 0's run (`tuitrain.client.ranks`, given rank 0's `pointer`). wandb's
    convention, logging from rank 0 only, keeps working as it did."""

    def __init__(
        self,
        rank: int,
        config: Mapping[str, Any] | None,
        name: str | None,
        pointer: Path | None = None,
    ) -> None:
        import tempfile

        self.rank = rank
        self.name = name or script_name()
        self.id = f"rank{rank}"
        self.dir = Path(tempfile.gettempdir())  # somewhere a script may write; no run dir
        self.config = Config(_plain(dict(config or {})))
        self.summary: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}
        self.project = self.entity = self.notes = self.group = self.job_type = None
        self.tags: tuple[str, ...] = ()
        self.url: str | None = None
        self.path = f"tuitrain/{self.id}"
        self.should_stop = False
        self.finished = False
        self.number = 1
        self.step = 0
        self.highest_step = -1
        self._said: set[str] = set()
        self._clock = CollectiveClock() if pointer is not None else None  # its collectives
        self._reporter = ranks.RankReporter(rank, pointer, self._clock) if pointer else None
        if self._reporter is not None:
            atexit.register(self.finish)  # a script that never calls finish: its last figures

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
        if self.finished:
            return
        at = self.step if step is None else _as_step(step)
        if at is None:
            return
        if step is None and commit:
            self.step += 1
        elif step is not None:
            self.step = max(self.step, at + 1 if commit else at)
        self.highest_step = max(self.highest_step, at)
        if self._reporter is not None and data:
            if self._clock is not None:
                self._clock.poll()  # a process group made since: its collectives are timed
            self._reporter.note(at)

    def update_config(self, values: Mapping[str, Any]) -> None:
        dict.update(self.config, _plain(dict(values)))

    def define_metric(self, *_: Any, **__: Any) -> None:
        pass

    def alert(self, *_: Any, **__: Any) -> None:
        pass

    def say_once(self, what: str) -> None:
        pass

    def finish(self, exit_code: int | None = None, **_: Any) -> None:
        if not self.finished and self._reporter is not None:
            atexit.unregister(self.finish)
            self._reporter.close()  # its last figures, from its thread (waits 2 s at most)
        if not self.finished and self._clock is not None:
            self._clock.detach()
        self.finished = True

    def __enter__(self) -> OtherRankRun:
        return self

    def __exit__(self, *_: object) -> None:
        self.finish()


def log(data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
    """`run.log` on the current run (one is started on first use, like wandb)."""
    if _other is not None and not _other.finished and other_rank() is not None:
        _other.log(data, step, commit)  # a rank other than 0: accepted, not written
        return
    (_current if _current is not None and not _current.finished else init()).log(data, step, commit)


def finish(exit_code: int | None = None) -> None:
    if _current is not None:
        _current.finish(exit_code)
    if _other is not None:
        _other.finish(exit_code)  # another rank: its last figures go to rank 0's run


def script_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "")
    stem = Path(path).stem if path else ""
    return stem if stem and stem not in ("-c", "__main__") else "script"


def _plain(value: Any) -> Any:
    """A config value as JSON: numbers, text, lists and tables; anything else as its text."""
    return json.loads(json.dumps(value, default=str))


class Config(dict):  # type: ignore[type-arg]
    """The run's config: item and attribute access, `update` (wandb's `config`)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class Run:
    """One run of a script. `flush_every` log calls or `flush_s` seconds between flushes;
    `alerts`: the `[alerts]` rules ({"loss_spike": "stop", ...}; actions off, warn, stop)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        config: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        flush_every: int = FLUSH_EVERY,
        flush_s: float = FLUSH_S,
        alerts: Mapping[str, Any] | None = None,
        device: str | None = None,
        project: str | None = None,
        entity: str | None = None,
        tags: Any = None,
        notes: str | None = None,
        group: str | None = None,
        job_type: str | None = None,
    ) -> None:
        from tuitrain.metrics.sinks import JsonlSink
        from tuitrain.rundir.control import remove_stale
        from tuitrain.rundir.lock import RunDirLock

        rules = _checked_alerts(alerts)  # one sentence before anything is created
        if isinstance(flush_every, bool) or not isinstance(flush_every, int) or flush_every < 1:
            raise UserError(f"flush_every = {flush_every!r:.40} must be a whole number >= 1.")
        if plain_number(flush_s) is None or not 0 < float(flush_s) <= 3600:
            raise UserError(f"flush_s = {flush_s!r:.40} must be a number of seconds in (0, 3600].")
        self.name = name or script_name()
        forced = os.environ.get("TUITRAIN_RUN_DIR")  # tuitrain run -- CMD: its run dir wins
        self._ignored_dir = (
            str(run_dir) if forced and run_dir and Path(run_dir) != Path(forced) else None
        )
        moved: str | None = None  # why the run is not in the folder asked for
        self.number = 1  # under tuitrain run: this run's place among the script's runs
        if forced:  # run 1 writes it, later runs a fresh folder beside it (rundir.manifest)
            self.dir, self.number = manifest.forced_dir(Path(forced))
        else:
            self.dir, moved = manifest.chosen_dir(run_dir, self.name)
        self.id = self.dir.name  # stable: scripts name checkpoint folders by it
        self.project, self.entity, self.notes = project, entity, notes
        self.group, self.job_type = group, job_type
        self.tags: tuple[str, ...] = tuple(str(t) for t in (tags or ()))
        self.url: str | None = None  # nothing to browse to: the run is a folder
        meta = {k: getattr(self, k) for k in META_KEYWORDS}
        self.meta: dict[str, Any] = {k: (list(v) if k == "tags" else v)
                                     for k, v in meta.items() if v}  # fmt: skip
        self._lock_file = RunDirLock(self.dir)  # one writer, as for a hosted run
        remove_stale(self.dir)  # a killed hosted run's control dir: a script reads none
        try:
            self.sink = JsonlSink(RunDir(self.dir).metrics)
        except BaseException:
            self._lock_file.release()
            raise
        self._forks = _forks  # a forked child (where _forks has moved) is not this writer
        self.config = Config(_plain(dict(config or {})))
        self.summary: dict[str, Any] = {}
        self.should_stop = False
        self.finished = False
        self.flush_every, self.flush_s = flush_every, float(flush_s)
        self.max_pending = MAX_PENDING
        self._pending_values = 0  # what the queue holds, in values (a row: its keys, at least 1)
        self._pending: list[tuple[int, float, dict[str, Any]]] = []
        self._mutex = threading.RLock()  # RLock: a signal may land while log() holds it
        self._room = threading.Condition(self._mutex)
        self._flushing = threading.RLock()  # one flush at a time; finish waits for it
        self._write = threading.Lock()  # records leave in order, from one thread at a time
        self._wake = threading.Event()
        self._calls = 0
        self._step = 0  # the next implicit step
        self._high = -1  # the highest step logged: a step below it is dropped (wandb's rule)
        self.dropped_back = 0  # log calls whose step went back
        self._inflight: list[_Batch] = []
        self._last_row: tuple[int, float] | None = None  # (step, time) of the last train row
        self._aliases: dict[str, str] = {}  # {field: the key the script logged it under}
        self._loss_seen = False  # a run that logs a loss times its steps by the loss's rows
        self._said: set[str] = set()
        self._axes: dict[str, str] = {}  # define_metric: glob -> the metric that is its x
        self._started = time.perf_counter()
        self._exc: tuple[str, str] | None = None  # an uncaught exception: (type, message)
        self._signal: str | None = None
        self._exit_code: int | None = None  # what sys.exit was given
        self._ranks: ranks.RankReader | None = None  # the other ranks' figures (torchrun)
        self._clock: CollectiveClock | None = None  # this rank's collectives (torchrun)
        self._busy_from: tuple[int, float] | None = None  # (step, time) its busy_s counts from
        self._pointer: Path | None = None
        self._exit_message = ""  # sys.exit("message"): the message
        self._exit_unknown = ""  # a SystemExit whose code the client could not read: where
        self.dropped_rows = 0  # log calls that never reached the file
        self.dropped_values = 0  # single values left out (unreadable, or over the line size)
        self._dropped_told = 0
        self.last_step: int | None = None
        self.rules = AlertRules(rules, BUSY_SCRIPT)  # a straggler: time outside collectives
        self._telemetry = _telemetry(device)
        self._write_header()
        if moved is not None:
            self._emit([event_record(moved, kind="client")])
        if self.number > 1:
            self._emit([event_record(
                f"run {self.number} of this tuitrain run: its own run dir {str(self.dir)!r:.300}"
                f", beside {forced!r:.300} (one run, one folder)", kind="client")])  # fmt: skip
        if self._ignored_dir is not None:
            self._emit([event_record(
                f"run_dir {self._ignored_dir!r:.300} was given, but tuitrain run set"
                f" TUITRAIN_RUN_DIR={forced!r:.300}: the run is written to"
                f" {str(self.dir)!r:.300}, where the dashboard reads it", level="warning",
                kind="client")])  # fmt: skip
        self._thread = threading.Thread(target=self._loop, name="tuitrain-flush", daemon=True)
        self._thread.start()
        self._main_frame = _main_module_frame()
        self._hooks()

    # ------------------------------------------------------------------ the script's side
    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
        """Keep `data` for the next flush: no conversion, no host sync (a few µs)."""
        if self.finished or _forks != self._forks:
            return  # a forked child (a helper, a DataLoader worker) never writes this run
        summary = self.summary
        for key, value in data.items():  # the summary holds each key's last value at once
            if isinstance(value, (int, float)) or _is_tensor(value):
                summary[key] = value
            elif isinstance(value, Mapping):  # {"train": {"loss": x}}: train/loss, as wandb
                data = _flattened(data)
                summary.update((k, v) for k, v in data.items() if _summary_value(v))
                break
            elif plain_number(value) is not None:
                summary[key] = value
        if step is None:
            at = self._step
            if commit:
                self._step += 1
        else:
            got = _as_step(step)
            if got is None:
                self._drop_call(
                    f"log: step {step!r:.60} is not a whole number in 0..{STEP_MAX} (an int64,"
                    " what every reader can place); these calls are dropped and counted"
                )
                return
            if got < self._high:
                self.dropped_back += 1
                if "step-back" in self._said:
                    return
                self._said.add("step-back")  # one warning, whatever the steps
                self.say_once(
                    f"log: step {got} is less than the current step {self._high}; steps must"
                    " not go back, so these calls are dropped (as wandb does; counted in"
                    " the end record's dropped_rows)"
                )
                return
            at = got
            self._step = max(self._step, at + 1 if commit else at)
        if at > STEP_MAX:  # the implicit counter past the last step
            self._drop_call(f"log: the step passed {STEP_MAX}; these calls are dropped and counted")
            return
        if at > self._high:
            self._high = at
        if self._clock is not None:
            self._clock.poll()  # a process group made since: its collectives are timed
        axes = self._axes
        if axes:  # define_metric: some keys go on another metric's axis
            data = self._split_axes(data, axes, commit)
        row = (at, time.perf_counter(), dict(data))
        with self._mutex:  # the fast path: room in the queue
            if self._pending_values < self.max_pending - len(row[2]) or not self._pending:
                self._pending.append(row)
                self._pending_values += len(row[2]) or 1
            else:
                self._put(row)
        self._calls += 1
        if self._calls % self.flush_every == 0:
            self._wake.set()

    @property
    def step(self) -> int:
        """wandb's `run.step`: the step the next log call without `step` takes."""
        return self._step

    @property
    def highest_step(self) -> int:
        """The highest step logged so far (-1 before the first): an explicit step below it is
        dropped, as wandb drops it."""
        return self._high

    @property
    def path(self) -> str:
        """wandb's `run.path` (entity/project/id), with what this run knows."""
        return "/".join(p for p in (self.entity, self.project or "tuitrain", self.id) if p)

    def _put(self, row: tuple[int, float, dict[str, Any]]) -> None:
        """Append a row to the bounded queue: when it is full, wait for the flush thread,
        then drop the row (counted)."""
        cost = max(len(row[2]), 1)
        with self._room:
            if self._pending and self._pending_values + cost > self.max_pending:
                self._wake.set()
                self._room.wait_for(
                    lambda: (
                        not self._pending
                        or self._pending_values + cost <= self.max_pending
                        or self.finished
                    ),
                    FULL_WAIT_S,
                )
                full = self._pending and self._pending_values + cost > self.max_pending
                if full or self.finished:
                    self.dropped_rows += 1
                    return
            self._pending.append(row)
            self._pending_values += cost

    def _drop_call(self, why: str) -> None:
        self.dropped_rows += 1
        self.say_once(why)

    def define_metric(self, name: str, step_metric: str | None = None, **_: Any) -> None:
        """wandb's: `name` (a glob such as `val/*`) is plotted against `step_metric`'s value
        (its step is that value when a log call carries it)."""
        if step_metric:
            self._axes[name] = step_metric

    def _split_axes(
        self, data: Mapping[str, Any], axes: dict[str, str], commit: bool
    ) -> Mapping[str, Any]:
        import fnmatch

        rest = dict(data)
        for pattern, axis in axes.items():
            x = data.get(axis)
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                continue
            moved = {
                k: rest.pop(k) for k in list(rest) if k != axis and fnmatch.fnmatch(k, pattern)
            }
            if moved and valid_step(int(x)):
                self._put((int(x), time.perf_counter(), moved))
        return rest

    def alert(self, title: str, text: str = "", level: str = "warning", **_: Any) -> None:
        """wandb's `run.alert`: an event in the run (the dashboard's banner shows it)."""
        if self.finished or _forks != self._forks:
            return
        self._emit([script_alert_event(f"{title}: {text}" if text else title, level.lower())])

    def finish(self, exit_code: int | None = None, *, status: str | None = None,
               reason: str | None = None) -> None:  # fmt: skip
        """Flush everything (waiting for the last transfers and for a flush still being
        converted), write the end record, release the run dir and undo what `init` did.
        Idempotent; in a process forked from the script it does nothing."""
        global _current
        if self.finished or _forks != self._forks:
            return
        self.finished = True
        with self._room:
            self._room.notify_all()  # a log() waiting for room gives up its row (counted)
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=FINISH_WAIT_S)
        if self._flushing.acquire(timeout=FINISH_WAIT_S):  # a flush still converting: wait
            try:
                self._flush_safely(final=True)
            finally:
                self._flushing.release()
        else:  # the flush thread is stuck (a disk that hangs): what it holds is counted
            with self._mutex:
                self.dropped_rows += len(self._pending) + sum(len(b.rows) for b in self._inflight)
                self._pending, self._inflight = [], []
        if status is None:
            status, reason = self._outcome(exit_code)
        code = exit_code if exit_code is not None else self._known_exit_code()
        totals: dict[str, Any] = {"elapsed_s": round(time.perf_counter() - self._started, 3)}
        if code is not None or self._exit_unknown:
            totals["exit_code"] = code  # null: a SystemExit whose code could not be read
        self.dropped_rows += self.dropped_back
        self.dropped_back = 0
        if self.dropped_rows or self.dropped_values:
            totals["dropped_rows"] = self.dropped_rows
            totals["dropped_values"] = self.dropped_values
        summary = _plain(_summary_numbers(self.summary)) or None
        if summary is not None and len(json.dumps(summary)) > MAX_RECORD_BYTES // 2:
            summary = None  # thousands of keys: their last values are in the train records
        end = end_record(
            status,
            reason or "",
            self.last_step if self.last_step is not None else 0,
            **totals,
            summary=summary,
        )
        with self._write:
            self._tell_dropped()
            self.sink.write(end)
            self.sink.close()
        self._lock_file.release()
        if self._pointer is not None:
            ranks.remove_pointer(self._pointer, self.dir)
        if self._clock is not None:
            self._clock.detach()
        manifest.note_used(self.dir)  # the next run asking for this folder gets one beside it
        self._unhook()
        if _current is self:
            _current = None

    def _known_exit_code(self) -> int | None:
        """The process's exit code as far as this run knows it (None: finish() mid-script)."""
        if self._signal is not None:
            return 128 + int(getattr(signal.Signals, self._signal, 0))
        if self._exit_code is not None:
            return self._exit_code
        if self._exc is not None:
            return 130 if self._exc[0] == "KeyboardInterrupt" else 1
        return None

    def _outcome(self, exit_code: int | None) -> tuple[str, str]:
        if self._signal is not None:
            return "stopped", f"stopped by {self._signal}"
        if self._exc is not None:
            kind, message = self._exc
            if kind == "KeyboardInterrupt":
                return "stopped", "stopped by SIGINT (KeyboardInterrupt)"
            return "failed", f"{kind}: {message}" if message else kind
        code = exit_code if exit_code is not None else self._exit_code
        said = f": {self._exit_message}" if self._exit_message else ""
        if code:
            return "failed", f"the script exited with code {code}{said}"
        if self._exit_unknown and exit_code is None:
            return "failed", (
                f"the script's top level ended at {self._exit_unknown} without returning (a"
                " SystemExit raised in a function, or an exception another excepthook took);"
                " its exit code could not be read here"
            )
        return "completed", "finish() called" if exit_code is not None else "finished"

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if isinstance(exc, SystemExit):
            self._note_exit(exc.code)
        elif exc is not None:
            self._exc = (
                type(exc).__name__,
                str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
            )
        self.finish()

    # ------------------------------------------------------------------ the flush thread
    def _loop(self) -> None:
        while not self.finished:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            with self._flushing:
                if self.finished:
                    return
                self._flush_safely()

    def _flush_safely(self, final: bool = False) -> None:
        """A flush that never raises: what it could not write is counted as dropped."""
        try:
            self._flush(final)
        except Exception as exc:  # noqa: BLE001 - a flush never kills the script
            lost = sum(len(b.rows) for b in self._inflight)
            self._inflight = []
            self.dropped_rows += lost
            self.say_once(f"flush failed ({type(exc).__name__}: {str(exc)[:200]}); {lost} rows"
                          " were dropped and counted")  # fmt: skip

    def _flush(self, final: bool = False) -> None:
        with self._flushing:
            self._flush_held(final)

    def _flush_held(self, final: bool) -> None:
        with self._room:
            pending, self._pending = self._pending, []
            self._pending_values = 0
            self._room.notify_all()  # room again for a log() that waits
        if pending:
            self._inflight.append(_Batch(pending, self))
        out: list[dict[str, Any]] = []
        while self._inflight and (final or self._inflight[0].ready()):
            batch = self._inflight[0]
            try:
                out.extend(self._records(batch.values()))
            except Exception as exc:  # noqa: BLE001 - this batch's rows only, counted
                self.dropped_rows += len(batch.rows)
                self.say_once(
                    f"flush: {len(batch.rows)} rows could not be read"
                    f" ({type(exc).__name__}: {str(exc)[:200]}); counted as dropped"
                )
            self._inflight.pop(0)
        if out or self.dropped_rows > self._dropped_told:
            self._emit(out)

    def _tell_dropped(self) -> None:
        """A warning event for the rows dropped since the last one said (under _write)."""
        if self.dropped_rows > self._dropped_told:
            new = self.dropped_rows - self._dropped_told
            self._dropped_told = self.dropped_rows
            self.sink.write(event_record(
                f"{new:,} log calls were dropped ({self.dropped_rows:,} in all): the queue of"
                f" {self.max_pending:,} values stayed full for {FULL_WAIT_S:g} s, or their step"
                " was out of range", level="warning", kind="client",
                dropped_rows=self.dropped_rows))  # fmt: skip

    def _emit(self, records: list[dict[str, Any]]) -> None:
        with self._write:
            self._tell_dropped()
            for record in records:
                cut = self.sink.cut_fields
                self.sink.write(record)
                if self.sink.cut_fields > cut:  # over MAX_RECORD_BYTES: the sink left some out
                    self.dropped_values += self.sink.cut_fields - cut
                    self._said_in_write(
                        "record-size",
                        f"a {record.get('type')} record at step {record.get('step')} was over"
                        f" {MAX_RECORD_BYTES // 1024} KiB (the contract's line size); its"
                        " largest fields were left out and counted in `dropped_fields` (said"
                        " once)",
                    )
                if record.get("type") == "train":
                    for alert in self.rules.judge(record):
                        self._act(alert)
                        self.sink.write(
                            alert_event(
                                alert.name, alert.action, alert.message, record.get("step"),
                                outcome="run.should_stop is set" if alert.action == "stop" else "",
                                **alert.figures,
                            )
                        )  # fmt: skip

    def _act(self, alert: Any) -> None:
        if alert.action == "stop":
            self.should_stop = True

    def _records(
        self, rows: list[tuple[int, float, dict[str, float | None]]]
    ) -> list[dict[str, Any]]:
        """Train and eval records from resolved rows (step, time, {key: float})."""
        out: list[dict[str, Any]] = []
        newest: dict[str, Any] | None = None  # the last train record: the telemetry's
        newest_at = 0.0  # when its row was logged
        names: dict[str, str] = {}  # fields first written under another name: said once
        for step, at, values in rows:
            train: dict[str, Any] = {}
            val: dict[str, Any] = {}
            for key, value in values.items():
                name = eval_name(key)
                if name is not None:
                    val[name.removeprefix(EVAL_PREFIX)] = value
                    field = name
                elif key in LOSS_KEYS:
                    field = "loss"
                elif key in LR_KEYS:
                    field = "lr"
                elif key in EPOCH_KEYS:
                    field = "epoch"
                elif key in GRAD_NORM_KEYS:
                    field = "grad_norm"
                else:  # never a field of the contract: `type`, `mfu` ... become `user/<key>`
                    field = user_field(key)
                if name is None:
                    train[field] = value
                if field != key and field not in self._aliases and field not in names:
                    names[field] = key
            if train:
                step_time_s = None
                self._loss_seen = self._loss_seen or "loss" in train
                # a row without the loss in a run that logs one (test metrics a step after the
                # last train step, a summary) is no training step: not timed, no anchor
                if "loss" in train or not self._loss_seen:
                    if self._last_row is not None and step > self._last_row[0]:
                        step_time_s = (at - self._last_row[1]) / (step - self._last_row[0])
                    self._last_row = (step, at)
                newest, newest_at = script_train_record(step, train, step_time_s), at
                out.append(newest)
            if val:
                out.append(eval_record(step, val))
            self.last_step = step if self.last_step is None else max(self.last_step, step)
        if newest is not None and self._telemetry is not None:
            with contextlib.suppress(Exception):
                # the client's measurement (a user's is user/...)
                add_telemetry(newest, self._telemetry.read())
        if newest is not None and self._ranks is not None:
            with contextlib.suppress(Exception):  # the other ranks' figures are a bonus too
                own = {**newest, "busy_s": self._own_busy(newest["step"], newest_at)}
                lists = self._ranks.lists(newest["step"], own)
                if lists is not None:
                    add_rank_lists(newest, lists)
        if names:  # ahead of the records that first hold them
            names = dict(list(names.items())[: max(0, MAX_ALIASES - len(self._aliases))])
            self._aliases.update(names)
            if names:
                out.insert(0, names_event(names))
        return out

    def _own_busy(self, step: int, at: float) -> float | None:
        """Rank 0's time a step outside collectives since the last flush's newest row (the
        other ranks report theirs over a second or so: alike)."""
        start, self._busy_from = self._busy_from, (step, at)
        if self._clock is None or start is None:
            return None
        busy = self._clock.busy(start, (step, at))
        self._clock.release(at)
        return busy

    def _gather_ranks(self, pointer: Path) -> None:
        """Rank 0 of a torchrun job: name this run's dir for the other ranks (`pointer`) and
        read their figures at each flush."""
        folder = RunDir(self.dir).ranks
        try:
            folder.mkdir(exist_ok=True)
        except OSError:
            return
        if ranks.write_pointer(pointer, self.dir):
            self._pointer = pointer
            self._ranks = ranks.RankReader(folder, ranks.world_size())
            self._clock = CollectiveClock()
            self._clock.poll()

    def say_once(self, what: str) -> None:
        if what not in self._said and _forks == self._forks:
            self._said.add(what)
            with contextlib.suppress(Exception):
                self._emit([event_record(what, level="warning", kind="client")])

    def _said_in_write(self, key: str, what: str) -> None:
        """say_once from inside _emit (the write lock held)."""
        if key not in self._said:
            self._said.add(key)
            self.sink.write(event_record(what, level="warning", kind="client"))

    # ------------------------------------------------------------------ header and exits
    def _write_header(self) -> None:
        device = "cpu"
        name = platform.processor() or platform.machine()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"
            name = torch.cuda.get_device_name()
        fields: dict[str, Any] = dict(
            preset=self.name,
            # the script's config; project, tags ... (wandb's init keywords) beside it
            config={"script": dict(self.config), **({"meta": self.meta} if self.meta else {})},
            device=device,
            device_name=name,
            precision=None,
            compile=None,
            world_size=int(os.environ.get("WORLD_SIZE", "1") or 1),
            torch=getattr(torch, "__version__", None),
            tuitrain=tuitrain.__version__,
            python=platform.python_version(),
            time=datetime.now(UTC).isoformat(timespec="seconds"),
            run_dir=str(self.dir),
            hostname=socket.gethostname(),
            argv=list(sys.argv),
            client=True,
            task=SCRIPT_TASK,
        )
        header = header_record(**fields)
        if len(json.dumps(header, default=str)) > MAX_HEADER_BYTES - 4096:
            # the config is too big for the header line every reader reads: it goes whole to
            # config.json, the header keeps a note (and the first 64 argv words)
            where = self._config_file()
            fields["config"] = {"script": {"config_file": where}}
            if self.meta:
                fields["config"]["meta"] = self.meta
            fields["argv"] = [str(a)[:4096] for a in sys.argv[:64]]
            header = header_record(**fields)
        with self._write:
            self.sink.write(header)

    def _config_file(self) -> str:
        """The whole config written to RUN_DIR/config.json (atomically); its name."""
        from tuitrain.core.safefile import write_atomic_text

        path = self.dir / "config.json"
        try:
            write_atomic_text(path, json.dumps(dict(self.config), default=str))
        except (OSError, UserError) as exc:
            return f"not written ({exc})"
        return path.name

    def update_config(self, values: Mapping[str, Any]) -> None:
        """Config set after init: kept, and written as a `config` event."""
        if self.finished or _forks != self._forks:
            return
        plain = _plain(dict(values))
        dict.update(self.config, plain)  # not a subclass's update (wandb's calls back here)
        if len(json.dumps(plain)) > MAX_RECORD_BYTES - 4096:  # too big for one record
            where = self._config_file()
            self._emit([event_record(f"config updated ({len(plain):,} keys; whole in {where})",
                                     kind="config", config={})])  # fmt: skip
            return
        self._emit([event_record("config updated", kind="config", config=plain)])

    def _hooks(self) -> None:
        """The exit hook, an excepthook, a `sys.exit` that notes its code, SIGTERM/SIGHUP
        handlers: each undone by `_unhook` (finish), so 1,000 runs in one process stack none."""
        atexit.register(self._at_exit)
        previous = sys.excepthook
        run = self

        def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            if not run.finished and _forks == run._forks:
                text = str(exc).strip()
                run._exc = (kind.__name__, text.splitlines()[0][:500] if text else "")
            previous(kind, exc, tb)

        sys.excepthook = hook
        self._excepthook = (hook, previous)
        real_exit = sys.exit

        def noting_exit(status: object = None) -> None:
            if threading.current_thread() is threading.main_thread():
                run._note_exit(status)
            real_exit(status)  # type: ignore[arg-type]

        sys.exit = noting_exit  # type: ignore[assignment]
        self._sys_exit = (noting_exit, real_exit)
        self._handled: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(signum) == signal.SIG_DFL:
                    signal.signal(signum, self._on_signal)
                    self._handled.append(signum)

    def _unhook(self) -> None:
        """What `_hooks` did, undone: the exit hook, the excepthook and sys.exit where they are
        still ours (a hook set on top of ours is left to whoever set it), the signals'
        default handling (the main thread only)."""
        atexit.unregister(self._at_exit)
        hook, previous = self._excepthook
        if sys.excepthook is hook:
            sys.excepthook = previous
        mine, real = self._sys_exit
        if sys.exit is mine:
            sys.exit = real
        if threading.current_thread() is threading.main_thread():
            for signum in self._handled:
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, signal.SIG_DFL)
        self._handled = []

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if _forks != self._forks:  # a forked child: the default action, not our run
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._signal = signal.Signals(signum).name
        raise SystemExit(128 + signum)  # through the script's finally blocks and atexit

    def _note_exit(self, status: object) -> None:
        """What `sys.exit(status)` / `raise SystemExit(status)` means: its code and message."""
        self._exit_code = _exit_code_of(status)
        if status is not None and not isinstance(status, int):
            text = str(status).strip()
            self._exit_message = text.splitlines()[0][:500] if text else ""

    def _at_exit(self) -> None:
        if not self.finished and _forks == self._forks:
            if self._exit_code is None and self._exc is None and self._signal is None:
                # no sys.exit, no exception: the script returned, or raised SystemExit itself
                ended = _system_exit_of(self._main_frame)
                if ended is None:
                    self._exit_code = 0  # the interpreter ends normally
                elif ended[0] is None:
                    self._exit_unknown = ended[1]
                else:
                    self._note_exit(ended[0])
            self.finish()


def _exit_code_of(status: object) -> int:
    """The exit code `sys.exit(status)` gives: None 0, an int itself, anything else 1."""
    if status is None:
        return 0
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return 1


def _main_module_frame() -> FrameType | None:
    """The frame of the script's top level (`python train.py`, `python -m pkg.train`), seen
    from any thread; None elsewhere (a notebook, an embedded interpreter)."""
    main = sys.modules.get("__main__")
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        top = frame.f_code.co_name == "<module>"
        if top and frame.f_globals is getattr(main, "__dict__", None):
            back = frame.f_back
            return frame if back is None or "runpy" in back.f_code.co_filename else None
        frame = frame.f_back
    return None


def _system_exit_of(frame: FrameType | None) -> tuple[object, str] | None:
    """At exit, after the script's top level ended: None when it returned; else it ended by
    a SystemExit that went through neither sys.exit nor the excepthook (`raise
    SystemExit("msg")`, `exit(2)`): (its argument read from that line's source where it is a
    literal, else None; "file:line")."""
    import ast
    import dis
    import linecache

    if frame is None:
        return None
    code = frame.f_code
    try:
        if dis.opname[code.co_code[frame.f_lasti]].startswith("RETURN"):
            return None
    except IndexError:
        return None
    where = f"{Path(code.co_filename).name}:{frame.f_lineno}"
    try:
        tree = ast.parse(linecache.getline(code.co_filename, frame.f_lineno or 0).strip())
    except (SyntaxError, ValueError):
        return None, where
    for node in ast.walk(tree):
        call = node.exc if isinstance(node, ast.Raise) else node
        if isinstance(node, ast.Raise) and isinstance(call, ast.Name) and call.id == "SystemExit":
            return 0, where  # `raise SystemExit`
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("SystemExit", "exit", "quit"):
            continue
        if not call.args:
            return 0, where
        with contextlib.suppress(ValueError, TypeError, SyntaxError, RecursionError):
            return ast.literal_eval(call.args[0]), where
        if isinstance(call.args[0], ast.JoinedStr):
            return 1, where  # an f-string: code 1 (its text is in the output)
        return None, where
    return None, where


def _as_step(step: object) -> int | None:
    """A step as an int (an int, numpy's integers, a whole float), None when it is none or
    outside 0..STEP_MAX."""
    if isinstance(step, bool):
        return None
    try:
        at = operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        x = plain_number(step)
        if x is None or not math.isfinite(x) or not x.is_integer():
            return None
        at = int(x)
    return at if valid_step(at) else None


def _checked_alerts(alerts: Mapping[str, Any] | None) -> dict[str, Any]:
    """The alert rules for a script, checked as a preset's `[alerts]` table is: numbers given
    as text ("5", from argparse or YAML) are read as numbers; an unknown key, a bad action or
    a value out of range is one sentence (UserError, a ValueError's kin for the script).
    pause and checkpoint mean nothing for a foreign loop: they act as warn."""
    from tuitrain.core.config import AlertsConfig, _build_section

    source = "TUITRAIN_ALERTS (tuitrain run --alert)"
    if alerts is None and os.environ.get("TUITRAIN_ALERTS"):  # from tuitrain run --alert
        try:
            alerts = dict(json.loads(os.environ["TUITRAIN_ALERTS"]))
        except (ValueError, TypeError) as exc:
            raise UserError(f"{source} is not a JSON table of alert rules ({exc}).") from None
    else:
        source = "alerts"
    if alerts is None:
        return {}
    if not isinstance(alerts, Mapping):
        raise UserError(f"{source} must be a table of rules ({{'loss_spike': 'stop'}}), not"
                        f" {type(alerts).__name__}.")  # fmt: skip
    raw: dict[str, Any] = {}
    for key, value in alerts.items():
        if isinstance(value, str) and value.strip() and value.strip() not in _ACTIONS:
            number = plain_number(_number_text(value))
            if number is not None:
                value = int(number) if float(number).is_integer() and "." not in value else number
        raw[str(key)] = value
    try:
        checked = _build_section("alerts", AlertsConfig, raw)
    except UserError as exc:
        raise UserError(f"{source}: {exc}") from None
    out = {k: getattr(checked, k) for k in raw}
    for key, action in out.items():
        if action in ("pause", "checkpoint"):
            out[key] = "warn"  # a foreign loop has no pause or checkpoint to take
    return out


_ACTIONS = ("off", "warn", "pause", "checkpoint", "stop")


def _number_text(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


class _Batch:
    """One flush's values: numbers at once, each device's tensors in one non-blocking copy.
    A value that cannot be read costs that value only (counted, said once per key)."""

    def __init__(self, rows: list[tuple[int, float, dict[str, Any]]], run: Run) -> None:
        self.run = run
        self.rows: list[tuple[int, float, dict[str, float]]] = []
        self._slots: dict[Any, list[tuple[dict[str, float], str, Any]]] = {}
        self._host: dict[Any, Any] = {}
        self._events: list[Any] = []
        for step, at, data in rows:
            if self.rows and self.rows[-1][0] == step:  # commit=False, then the rest of it
                values = self.rows[-1][2]
                self.rows[-1] = (step, at, values)
            else:
                values = {}
                self.rows.append((step, at, values))
            for key, value in data.items():
                if not isinstance(key, str) or len(key) > MAX_KEY_CHARS:
                    self.skip(key, f"a key must be text of at most {MAX_KEY_CHARS} characters")
                elif _is_tensor(value):
                    self._tensor(values, key, value)
                else:
                    number = plain_number(value)  # int, float, bool, numpy, anything .item()
                    if number is None:
                        self.skip(key, f"it is a {type(value).__name__}, not a real number or"
                                       " a one-element tensor")  # fmt: skip
                    else:
                        values[key] = number
        self._launch()

    def skip(self, key: object, why: str) -> None:
        self.run.dropped_values += 1
        self.run.say_once(f"log: {key!r:.60}: {why}; tuitrain keeps numbers only, so that value"
                          " is left out and counted (said once per key)")  # fmt: skip

    def _tensor(self, values: dict[str, float], key: str, value: Any) -> None:
        try:
            if type(value).__name__ == "DTensor":  # torch.distributed.tensor.DTensor
                if not all(type(p).__name__ == "Replicate" for p in value.placements):
                    self.skip(
                        key,
                        "it is a sharded or partial DTensor (reading it is a"
                        " collective); log value.full_tensor() on every rank",
                    )
                    return
                value = value.to_local()  # replicated: this rank's copy is the value
            if value.numel() != 1 or value.is_complex() or value.is_sparse or value.is_meta:
                self.skip(key, f"it is a tensor of shape {tuple(value.shape)} and dtype"
                               f" {value.dtype}, not a one-element real tensor")  # fmt: skip
                return
        except Exception as exc:  # noqa: BLE001 - an odd tensor subclass
            self.skip(key, f"the tensor could not be read ({type(exc).__name__})")
            return
        self._slots.setdefault(value.device, []).append((values, key, value))

    def _launch(self) -> None:
        if not self._slots:  # no tensors (a script without torch never imports it here)
            return
        import torch

        for device, slots in list(self._slots.items()):
            dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS: no fp64
            try:
                stacked = torch.stack([t.detach().reshape(()).to(dtype) for _, _, t in slots])
                if device.type == "cuda":
                    host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
                    host.copy_(stacked, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record()
                    self._events.append(event)
                    self._host[device] = host
                else:
                    self._host[device] = stacked  # on the host already (CPU, or MPS synced)
            except Exception:  # noqa: BLE001 - one odd tensor: read them one by one
                del self._slots[device]
                for values, key, tensor in slots:
                    try:
                        values[key] = float(tensor.detach().reshape(()).to(dtype).item())
                    except Exception as exc:  # noqa: BLE001 - that value only
                        self.skip(key, f"the tensor could not be read ({type(exc).__name__}:"
                                       f" {str(exc)[:120]})")  # fmt: skip

    def ready(self) -> bool:
        return all(event.query() for event in self._events)

    def values(self) -> list[tuple[int, float, dict[str, float | None]]]:
        for event in self._events:
            event.synchronize()
        for device, slots in self._slots.items():
            read = self._host[device].tolist()
            for (values, key, _), value in zip(slots, read, strict=True):
                values[key] = value
        return [
            (step, at, {k: (v if math.isfinite(v) else None) for k, v in values.items()})
            for step, at, values in self.rows
        ]


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def eval_name(key: str) -> str | None:
    """`val/NAME`, `eval/NAME`, `eval_NAME`, `val_NAME` -> `val_NAME` (slashes in NAME as
    underscores); None for other keys."""
    for prefix in EVAL_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            return "val_" + key[len(prefix) :].replace("/", "_")
    return None


class _HostTelemetry:
    """Host RSS only, for a script that has not imported torch (importing it for telemetry
    would cost seconds and hundreds of MB)."""

    def read(self) -> dict[str, int | float | None]:
        return {"host_rss_bytes": host_rss_bytes()}


def _telemetry(device: str | None) -> Any:
    if "torch" not in sys.modules:  # the script never imported torch: no torch here either
        return _HostTelemetry()
    try:
        import torch

        from tuitrain.engine.telemetry import Telemetry

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        return Telemetry(torch.device(device))
    except Exception:  # noqa: BLE001 - telemetry is a bonus, never a failure
        return None


def _flattened(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as wandb flattens them: {"train": {"loss": x}} -> {"train/loss": x}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flattened(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _summary_value(value: Any) -> bool:
    return isinstance(value, (int, float)) or _is_tensor(value) or plain_number(value) is not None


def _summary_numbers(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary for the end record: tensors and numpy scalars read as numbers (at finish,
    after the last flush: no extra wait), a value that cannot be read left out."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[key] = None
        elif isinstance(value, (bool, int, float, str)) or value is None:
            out[key] = value
        elif _is_tensor(value):
            with contextlib.suppress(Exception):
                if value.is_complex() or value.numel() != 1:
                    continue
                x = float(value.detach().reshape(()).float().item())
                out[key] = x if math.isfinite(x) else None
        elif plain_number(value) is not None:
            x = float(plain_number(value) or 0.0)
            out[key] = x if math.isfinite(x) else None
        else:
            out[key] = value
    return out
