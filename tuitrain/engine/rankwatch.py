"""The stalled-rank watch: under DDP or FSDP, which rank stopped reaching the step while the
others wait for it in a collective, with every rank's Python stacks on disk.

Synchronous data parallelism runs the ranks in lockstep, so while one rank is stuck (a hung
data loader, a deadlock, a dead peer) every rank shows the same optimizer step: the step
counter cannot say who. What differs is how far each rank got inside the step. The training
loop keeps that in a plain object (`Progress`: micro-batches begun and the phase, data ->
forward -> backward -> update: one int and one str assignment per micro-batch, nothing else;
and the long work the rank is in on purpose, `OWN_WORK`: set before it starts, cleared after);
a thread on every rank publishes it as a heartbeat in the process group's c10d store, every
`stalled_rank_s` / 15 seconds (0.2 to 2 s: 2 s at the default 30 s bound), with two store
calls a tick when nothing happened (each call hands the GIL to and from the training
loop). Rank 0's thread reads every heartbeat and judges (`Verdict`):

- a rank is *behind* when another rank is further into the step (waiting in the collective
  for it) and it has not moved for the bound, counted from when the other went ahead; never
  while it is in its own long work (an evaluation, its first compiled step, a checkpoint, a
  profile, a memory snapshot: one rank's may take longer than the others' by any amount);
- a rank is *silent* when its heartbeat has not changed for the bound (a dead process, or a
  Python that no longer runs its threads).

The bound is max(`alerts.stalled_rank_s`, `alerts.stalled_rank_factor` x the median step
time). A rank stuck where the others also stand (all in one FSDP all-gather) is not told
apart here; the single-process stall watch (`alerts.stall`) still sees that no step ends.

On a verdict rank 0 raises the `stalled_rank` alert (the rank, its step and phase, for how
long, the stacks folder) and sets a dump request in the store; every rank's thread then
writes `faulthandler.dump_traceback(all_threads=True)` to `RUN_DIR/stacks/rank-N.txt` and, on
NCCL, the Flight Recorder's trace to `RUN_DIR/stacks/nccl-trace-rank-N.pkl`, each through the
safe-file layer (a temp file of a fresh name made with O_EXCL | O_NOFOLLOW, renamed into
place: a reader never sees half of one, and a link planted under any of these names is
replaced, never written through; a `stacks` that is a link is not written into). With the
`stop` action rank 0 then sets a stop in the store: the stalled rank ends at once (its end
record first, exit 1); the others give their own loop a grace period to fail on the broken
collective and end the same way if it does not (never rank 0 under the dashboard, whose
engine thread is not the process: there the failure comes from the collective, within
distributed.timeout_s).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import socket
import stat
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuitrain.core.control import Control
from tuitrain.core.errors import UserError
from tuitrain.core.safefile import (
    link_refused,
    not_regular,
    open_nofollow,
    replacing,
    write_atomic_bytes,
)

PHASES = ("data", "forward", "backward", "update")  # the order within one micro-batch
# work one rank may spend long in while the others wait for it in a collective, never a stall:
# an evaluation (every rank runs its own, one may be slower), the first step of a compiled
# model, a checkpoint, a profile's trace, a memory snapshot (files: slow on a slow disk)
OWN_WORK = ("eval", "compile", "save", "profile", "memory snapshot")
POLL_S = 1.0  # heartbeat and judging period at most (a bound of 15 s or more: 2 s)
POLL_MAX_S = 2.0
DUMP_WAIT_S = 5.0  # stop: how long rank 0 waits for every rank's stacks before the stop
GRACE_S = 10.0  # stop: how long a rank that is not stalled waits for its loop to fail
STEP_WINDOW = 20  # the median step time is over this many observations
PREFIX = "tuitrain/rankwatch"


class Progress:
    """How far this rank got: micro-batches begun and the phase of the current one, and the
    long work it is in (one of OWN_WORK, or ""). The training loop assigns the fields; the
    watch thread only reads them."""

    __slots__ = ("micro", "phase", "work")

    def __init__(self) -> None:
        self.micro = 0
        self.phase = "update"
        self.work = ""


@dataclass(frozen=True, slots=True)
class Beat:
    """One rank's heartbeat as published in the store."""

    beat: int  # the publisher's tick count: it moves while the rank's Python runs
    micro: int
    phase: str
    step: int  # the last optimizer step this rank finished
    done: bool = False  # the rank left its training loop (not waiting for anyone)
    pid: int = 0  # where to look when the heartbeat stops (py-spy dump --pid)
    host: str = ""
    work: str = ""  # the long work it is in (OWN_WORK): behind the others on purpose

    @property
    def position(self) -> tuple[int, int]:
        phase = PHASES.index(self.phase) if self.phase in PHASES else len(PHASES)
        return (self.micro, phase)

    def to_json(self) -> str:
        fields = ("beat", "micro", "phase", "step", "done", "pid", "host", "work")
        return json.dumps({name: getattr(self, name) for name in fields})

    @classmethod
    def from_json(cls, text: bytes | str) -> Beat | None:
        try:
            raw = json.loads(text)
            where = (int(raw.get("pid", 0)), str(raw.get("host", "")))
            done, work = bool(raw.get("done", False)), str(raw.get("work", ""))
            numbers = (int(raw["beat"]), int(raw["micro"]), str(raw["phase"]), int(raw["step"]))
            return cls(*numbers, done, *where, work)
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class Stalled:
    """A stalled rank: `why` is "behind" (others wait for it) or "silent" (no heartbeat)."""

    rank: int
    why: str
    seconds: float
    beat: Beat | None
    waiting: tuple[int, ...] = ()  # the ranks further into the step


def stall_bound(floor_s: float, factor: float, median_step_s: float | None) -> float:
    """max(floor, factor x the median step time): a slow model's step is not a stall."""
    return max(floor_s, factor * median_step_s) if median_step_s else floor_s


class Verdict:
    """Rank 0's judgement over successive reads of every rank's heartbeat, on its own clock
    (no clock is compared across hosts)."""

    def __init__(self, world_size: int, now: float) -> None:
        self.world_size = world_size
        self.changed: dict[int, tuple[int | None, float]] = {
            r: (None, now) for r in range(world_size)
        }  # rank -> (last beat number, when it last changed)
        self.behind: dict[int, tuple[tuple[int, int], float]] = {}  # rank -> (where, since)

    def judge(self, beats: Mapping[int, Beat | None], now: float, bound: float) -> list[Stalled]:
        """The stalled ranks now (each at most once per verdict call)."""
        out: list[Stalled] = []
        for rank in range(self.world_size):
            beat = beats.get(rank)
            number = beat.beat if beat is not None else None
            last, since = self.changed[rank]
            if number != last:
                self.changed[rank] = (number, now)
            elif (beat is None or not beat.done) and now - since >= bound:
                out.append(Stalled(rank, "silent", now - since, beat))
        live = {r: b for r, b in beats.items() if b is not None and not b.done}
        silent = {s.rank for s in out}
        for rank, beat in live.items():
            ahead = tuple(
                r for r, b in live.items() if r not in silent and b.position > beat.position
            )
            if not ahead or beat.work:  # a long evaluation, compile or save is no stall
                self.behind.pop(rank, None)
                continue
            where, since = self.behind.get(rank, (None, now))
            if where != beat.position:
                where, since = beat.position, now
                self.behind[rank] = (where, since)
            if rank not in silent and now - since >= bound:
                out.append(Stalled(rank, "behind", now - since, beat, ahead))
        return sorted(out, key=lambda s: s.rank)


class StepClock:
    """The median seconds per optimizer step, from the step counter read once a tick."""

    def __init__(self) -> None:
        self.seen: tuple[int, float] | None = None
        self.samples: deque[float] = deque(maxlen=STEP_WINDOW)

    def observe(self, step: int, now: float) -> None:
        if self.seen is not None and step > self.seen[0]:
            self.samples.append((now - self.seen[1]) / (step - self.seen[0]))
        if self.seen is None or step != self.seen[0]:
            self.seen = (step, now)

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


def describe(stalled: Stalled, stacks: Path | None) -> tuple[str, dict[str, Any], int | None]:
    """The alert's message, figures and step (the step the rank is in) for one stalled
    rank."""
    beat = stalled.beat
    step = beat.step + 1 if beat is not None else None  # the step it is in
    where = f"in step {step}, phase {beat.phase}" if beat is not None else "before its first beat"
    if beat is not None and beat.work:
        where += f", in its {beat.work}"
    folder = f"; every rank's Python stacks: {stacks}/" if stacks is not None else ""
    if stalled.why == "silent":
        text = (
            f"rank {stalled.rank}'s heartbeat stopped {stalled.seconds:.0f} s ago ({where}): "
            "the process died, or its Python is wedged (a C call holding the GIL)"
        )
        if beat is not None and beat.pid:
            text += f"; py-spy dump --pid {beat.pid} on {beat.host} shows where, if it lives"
    else:
        others = ", ".join(str(r) for r in stalled.waiting)
        waits = f"ranks {others} wait" if len(stalled.waiting) > 1 else f"rank {others} waits"
        text = (
            f"rank {stalled.rank} has not moved for {stalled.seconds:.0f} s ({where}) while "
            f"{waits} for it in a collective: a hung data loader, a deadlock, or a slow "
            "device on that rank"
        )
    figures: dict[str, Any] = {
        "rank": stalled.rank,
        "why": stalled.why,
        "phase": beat.phase if beat is not None else None,
        "work": (beat.work or None) if beat is not None else None,
        "seconds": round(stalled.seconds, 1),
        "waiting_ranks": list(stalled.waiting),
        "stacks": str(stacks) if stacks is not None else None,
        "pid": beat.pid if beat is not None else None,
        "host": beat.host if beat is not None else None,
    }
    return text + folder, figures, step


def stacks_folder(stacks: Path) -> Path:
    """`stacks`, made if missing; a link or anything but a directory there is refused
    (LinkRefused, NotRegular): nothing is written into a folder a link leads to."""
    with contextlib.suppress(FileExistsError):
        stacks.mkdir(parents=True)
    mode = os.lstat(stacks).st_mode
    if stat.S_ISLNK(mode):
        raise link_refused(stacks)
    if not stat.S_ISDIR(mode):
        raise not_regular(stacks, mode, "remove or rename it")
    return stacks


def write_stacks(stacks: Path, rank: int, beat: Beat, nccl: bool) -> None:
    """This process's Python stacks (every thread) to stacks/rank-N.txt, whole or not at all;
    on NCCL the Flight Recorder's trace beside it (empty unless its buffer was sized). Raises
    OSError or UserError (a link or a special file where the folder goes) when it cannot."""
    stacks = stacks_folder(stacks)
    with replacing(stacks / f"rank-{rank}.txt") as temp, open_nofollow(temp, "w") as out:
        out.write(
            f"rank {rank} pid {os.getpid()} host {socket.gethostname()} step {beat.step} "
            f"phase {beat.phase} micro-batch {beat.micro} at {time.strftime('%H:%M:%S')}\n\n"
        )
        out.flush()
        faulthandler.dump_traceback(out, all_threads=True)
    if nccl:
        with contextlib.suppress(Exception):  # no recorder in this build: the stacks suffice
            import torch

            dump = getattr(torch._C._distributed_c10d, "_dump_nccl_trace")  # noqa: B009
            write_atomic_bytes(stacks / f"nccl-trace-rank-{rank}.pkl", dump())


RaiseAlert = Callable[[str, dict[str, Any], int | None], None]  # (message, figures, step)
Leave = Callable[[str], None]  # (reason): write the end record and end the process


class RankWatch:
    """The heartbeat thread of one rank; on rank 0 also the judge. Use as a context manager
    around the training loop."""

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        progress: Progress,
        control: Control,
        *,
        stacks: Path | None,
        action: str,
        floor_s: float,
        factor: float,
        raise_alert: RaiseAlert,
        leave: Leave,
        may_leave: bool,
        nccl: bool = False,
    ) -> None:
        self.store = store
        self.rank, self.world_size = rank, world_size
        self.progress, self.control = progress, control
        self.stacks = stacks  # the run dir's stacks folder (None: a run without files)
        self.action, self.floor_s, self.factor = action, floor_s, factor
        self.raise_alert, self.leave, self.may_leave = raise_alert, leave, may_leave
        self.nccl = nccl
        self.beats = 0
        self.where = (os.getpid(), socket.gethostname())
        self.dumped = 0  # the last dump request this rank answered
        self.reported: dict[int, tuple[str, tuple[int, int] | None]] = {}  # rank -> episode
        self.clock = StepClock()
        self.verdict: Verdict | None = None
        # a tick wakes this thread and each store call hands the GIL back and forth with the
        # training loop (up to the switch interval, 5 ms, each way): few calls, few ticks
        self.poll_s = min(POLL_MAX_S, max(0.2, floor_s / 15.0))
        self.news_seen = 0  # the store's "news" counter: rank 0 adds 1 after a dump or a stop
        self.all_beating = False  # every rank's heartbeat key exists (keys are never deleted)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tuitrain-rankwatch", daemon=True)

    def __enter__(self) -> RankWatch:
        if self.action != "off" and self.world_size > 1:
            self.publish()  # the key exists before rank 0 first reads it
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0 * self.poll_s)
            with contextlib.suppress(Exception):  # the store may be gone with a failed peer
                self.publish(done=True)

    # -- every rank ----------------------------------------------------------------------
    def publish(self, done: bool = False) -> Beat:
        self.beats += 1
        progress, step = self.progress, self.control.step
        beat = Beat(
            self.beats, progress.micro, progress.phase, step, done, *self.where, progress.work
        )
        self.store.set(f"beat/{self.rank}", beat.to_json())
        return beat

    def read(self, key: str) -> bytes | None:
        """A key's value, or None when absent (never a blocking get on a missing key)."""
        return self.store.get(key) if self.store.check([key]) else None

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # a store gone with its host ends the watch
            self.verdict = Verdict(self.world_size, time.monotonic())
            while not self._stop.wait(self.poll_s):
                self.tick()

    def tick(self) -> None:
        """Publish the heartbeat and look for news (two store calls when there is none);
        on news, answer a dump request and obey a stop; rank 0 then judges."""
        beat = self.publish()
        news = int(self.store.add("news", 0))  # creates the key at 0 when absent
        if news == self.news_seen:
            if self.rank == 0:
                self.judge()
            return
        self.news_seen = news
        request = self.read("dump")
        if request is not None and int(request) > self.dumped:
            self.dumped = int(request)
            if self.stacks is not None:
                with contextlib.suppress(OSError, UserError):  # a full disk: the watch goes on
                    write_stacks(self.stacks, self.rank, beat, self.nccl)
            self.store.set(f"dumped/{self.rank}", str(self.dumped))
        stop = self.read("stop")
        if stop is not None:
            self.obey_stop(json.loads(stop))
            return
        if self.rank == 0:
            self.judge()

    def obey_stop(self, stop: Mapping[str, Any]) -> None:
        """The stalled rank leaves now; the others once their loop has had GRACE_S to fail
        on the broken collective (ending the watch on its way out) and has not."""
        reason = str(stop["reason"])
        if self.rank not in stop["ranks"] and self._stop.wait(GRACE_S):
            return
        if self.may_leave and not self._stop.is_set():
            self.leave(reason)
        self._stop.set()  # under the dashboard: the collective's failure ends the run

    # -- rank 0 --------------------------------------------------------------------------
    def judge(self) -> None:
        assert self.verdict is not None
        now = time.monotonic()
        if self.control.state == "running":
            self.clock.observe(self.control.step, now)
        beats = self.read_beats()
        bound = stall_bound(self.floor_s, self.factor, self.clock.median_s)
        # paused: every rank waits in the pause's collectives on purpose (a silent heartbeat
        # is still a stall); an evaluation or a compile is each rank's own, in its beat
        paused = self.control.state == "paused"
        found = [
            s
            for s in self.verdict.judge(beats, now, bound)
            if (not paused or s.why == "silent") and self.news(s)
        ]
        for rank in [r for r in self.reported if r not in {s.rank for s in found}]:
            if not self.still_stalled(rank, beats):
                del self.reported[rank]  # it moved: a later stall is a new episode
        if not found:
            return
        request = self.dumped + 1
        self.store.set("dump", str(request))
        self.store.add("news", 1)
        for stalled in found:
            message, figures, step = describe(stalled, self.stacks)
            self.raise_alert(message, figures | {"bound_s": round(bound, 1)}, step)
        if self.action == "stop":
            self.await_stacks(request, exclude={s.rank for s in found if s.why == "silent"})
            first = found[0]
            reason = (
                f"stopped by alert stalled_rank: rank {first.rank} stalled ({first.why}) "
                f"in step {describe(first, None)[2]}"
            )
            self.store.set("stop", json.dumps({"reason": reason, "ranks": [s.rank for s in found]}))
            self.store.add("news", 1)

    def read_beats(self) -> dict[int, Beat | None]:
        """Every rank's heartbeat: one round trip once all have published, else key by key
        (a missing key is never waited for)."""
        keys = [f"beat/{r}" for r in range(self.world_size)]
        self.all_beating = self.all_beating or self.store.check(keys)
        if self.all_beating:
            raws: list[bytes | None] = list(self.store.multi_get(keys))
        else:
            raws = [self.read(key) for key in keys]
        return {r: Beat.from_json(raw) if raw is not None else None for r, raw in enumerate(raws)}

    def news(self, stalled: Stalled) -> bool:
        episode = (stalled.why, stalled.beat.position if stalled.beat else None)
        if self.reported.get(stalled.rank) == episode:
            return False
        self.reported[stalled.rank] = episode
        return True

    def still_stalled(self, rank: int, beats: Mapping[int, Beat | None]) -> bool:
        _, where = self.reported[rank]
        beat = beats.get(rank)
        return (beat.position if beat else None) == where

    def await_stacks(self, request: int, exclude: set[int]) -> None:
        """Up to DUMP_WAIT_S for every live rank to write its stacks (the stop ends them)."""
        if self.stacks is not None and 0 not in exclude and self.dumped < request:
            self.dumped = request
            with contextlib.suppress(OSError, UserError):
                write_stacks(self.stacks, 0, self.publish(), self.nccl)
            self.store.set("dumped/0", str(request))
        deadline = time.monotonic() + DUMP_WAIT_S
        for rank in range(self.world_size):
            while rank not in exclude and time.monotonic() < deadline:
                answer = self.read(f"dumped/{rank}")
                if answer is not None and int(answer) >= request:
                    break
                time.sleep(0.1)


FLIGHT_RECORDER_ENTRIES = "2000"  # collectives the NCCL Flight Recorder keeps (torch's advice)


def flight_recorder_env(environ: MutableMapping[str, str], stacks: Path | None) -> dict[str, str]:
    """The NCCL Flight Recorder's settings the user has not made, set in `environ` (call it
    before the NCCL process group starts: torch reads them then): a buffer, so the recorder
    records; its dump on a collective timeout; and, when the run dir is known by then, that
    dump as `stacks/nccl-trace-rank-N` beside the stacks. Returns what it set."""
    wanted = {"TORCH_NCCL_TRACE_BUFFER_SIZE": FLIGHT_RECORDER_ENTRIES,
              "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}  # fmt: skip
    if stacks is not None:
        try:
            stacks_folder(stacks)  # NCCL's dump does not make the folder; never through a link
            wanted["TORCH_FR_DUMP_TEMP_FILE"] = str(stacks / "nccl-trace-rank-")
        except (OSError, UserError):
            pass  # a run dir that cannot be written: the run's own check says so in a sentence
    if "TORCH_FR_BUFFER_SIZE" in environ:  # the newer name of the buffer's size
        del wanted["TORCH_NCCL_TRACE_BUFFER_SIZE"]
    if "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" in environ:  # the older name of the dump's prefix
        wanted.pop("TORCH_FR_DUMP_TEMP_FILE", None)
    added = {key: value for key, value in wanted.items() if key not in environ}
    environ.update(added)
    return added


_watches = 0  # runs watched in this process: every rank counts the job's runs alike


def watch_store(run_dir: Path | None) -> Any:
    """The default process group's store under a prefix of this run (a next run in the same
    job, even in the same run dir, gets fresh keys: no stale dump or stop request)."""
    import torch.distributed as dist

    global _watches
    _watches += 1
    store = dist.distributed_c10d._get_default_store()
    return dist.PrefixStore(f"{PREFIX}/{_watches}/{run_dir}/", store)
