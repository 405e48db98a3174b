"""Every rank's figures in rank 0's run: the other ranks of a torchrun job report to it.

Under torchrun each rank may call `tuitrain.init`/`log`; rank 0 writes the job's one run and
the others (`OtherRankRun`) write no run of their own. They do report what rank 0 cannot see:
their step time (measured between log calls, as rank 0's run measures its own), their time
a step outside collectives (`busy_s`: the straggler measure, where the job's collectives can
be timed, `tuitrain.client.collectives`) and their memory (host RSS; the CUDA allocator's
peak where the script has initialised CUDA). Rank 0 puts them beside its own in its train
records as the per-rank lists the hosted engine writes under DDP (`rank_step_time_s`,
`rank_busy_s`, `rank_host_rss_bytes`, `rank_mem_peak_bytes`); the straggler alert judges
`rank_busy_s` there as it does a hosted run's.

The transport is files, because a file can neither block nor end the job: each other rank
appends one JSON line a flush (every FLUSH_S seconds, when it logged since the last) to
`<rank 0's run dir>/ranks/rank-<N>.jsonl`, and rank 0 reads what is new at its own flush. The
other ranks learn rank 0's run dir from a pointer file rank 0 writes atomically at init,
`<runs folder>/.tuitrain-jobs/<job key>.json`: the runs folder is the parent of the run dir
every rank was given (TUITRAIN_RUN_DIR under `tuitrain run`, the `run_dir` argument, else
`runs/`); the key is `next_job_key`'s. A rank looks for the pointer at each flush and never
waits for it; one left by an older job (older than this process) is ignored; rank 0 removes
its pointer at finish. Ranks on another node without a shared filesystem never find it:
their figures stay null, and nothing is said. The files themselves (made whole and private,
read without following links or blocking on special files) are `tuitrain.rundir.ranks`'s.

torchrun's c10d TCPStore would reach every node, but it is the job's own: the script's
process group holds it, a store call that meets a missing key waits for the group's timeout,
and rank 0's store outliving the workers is torchrun's business, not ours. Files cost the job
nothing when they fail.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuitrain.client.collectives import CollectiveClock
from tuitrain.client.hostinfo import host_rss_bytes
from tuitrain.rundir.layout import RANKS_DIR
from tuitrain.rundir.ranks import (
    POINTER_DIR,
    START_SLACK_S,
    append_report,
    pointer_path,
    read_pointer,
    read_report,
    remove_pointer,
    write_pointer,
)

__all__ = [  # the pointer's and the reports' files, for the client and its tests
    "POINTER_DIR",
    "RANKS_DIR",
    "START_SLACK_S",
    "pointer_path",
    "read_pointer",
    "remove_pointer",
    "write_pointer",
]

FLUSH_S = 1.0  # how often another rank reports (when it logged since the last report)
STALE_S = 10.0  # a rank's figures older than this and 3 steps (rank 0's clock) are null: quiet
MAX_READ_BYTES = 1 << 20  # what rank 0 reads of one rank's file at one flush
MAX_PENDING = 10_000  # entries held per rank waiting for rank 0's rows to reach their step
JOB_ENV = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT",
           "SLURM_JOB_ID")  # fmt: skip
RANK_FIELDS = ("rank_step_time_s", "rank_busy_s", "rank_host_rss_bytes", "rank_mem_peak_bytes")

_runs = 0  # the runs init started in this process on any rank: the job key's last part


def world_size() -> int:
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1") or 1), 1)
    except ValueError:
        return 1


def _loopback(addr: str) -> bool:
    """True for a MASTER_ADDR that names no one machine: unset, localhost, 127.x, ::1."""
    if addr.lower() in ("", "localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        ip = ipaddress.ip_address(addr.strip("[]"))
    except ValueError:
        return False  # a host name: the master node's, the same on every rank
    return ip.is_loopback or ip.is_unspecified


def next_job_key() -> str | None:
    """The name every rank of this job gives its next run, or None outside a job of several
    ranks (or one nothing names). The same on every rank of one job (when each calls init as
    often), never the same for two jobs running at once: it is made of what every rank of
    the job shares and no other live job does. The job's rendezvous, MASTER_ADDR and
    MASTER_PORT (no two live jobs listen on one address and port), with this node's hostname
    where MASTER_ADDR names no machine (127.0.0.1: a one-node job, every rank on this node;
    two nodes' jobs may both use 127.0.0.1:29500); torchrun's TORCHELASTIC_RUN_ID (random
    under --standalone) and restart count; SLURM_JOB_ID; and the run's number in its process
    (a k-fold loop's runs stay apart). Hashed into a name of fixed length. Not a secret: a
    pointer is trusted for its owner and kind (`tuitrain.rundir.ranks`), not its name."""
    global _runs
    if world_size() < 2:
        return None
    _runs += 1
    env = {key: os.environ.get(key, "") for key in JOB_ENV}
    if not (env["TORCHELASTIC_RUN_ID"] or env["MASTER_PORT"] or env["SLURM_JOB_ID"]):
        return None  # nothing names the job: no pointer
    node = socket.gethostname() if _loopback(env["MASTER_ADDR"]) else ""
    text = "\0".join([*env.values(), node, str(_runs)])
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def process_start_time() -> float | None:
    """When this process started (wall clock), from /proc; None where there is none."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def cuda_peak_bytes() -> int | None:
    """The CUDA allocator's peak on this rank's device, where the script initialised CUDA
    (never initialises it; no device sync)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        local = int(os.environ.get("LOCAL_RANK", "-1") or -1)
        index = local if 0 <= local < torch.cuda.device_count() else torch.cuda.current_device()
        return int(torch.cuda.max_memory_allocated(index))
    except Exception:  # noqa: BLE001 - telemetry is a bonus
        return None


class RankReporter:
    """Another rank's side: notes each log call's (step, time) and, every FLUSH_S seconds
    from a daemon thread, appends its figures to its file in rank 0's run dir; `clock`
    times the rank's collectives for its `busy_s`."""

    def __init__(self, rank: int, pointer: Path, clock: CollectiveClock | None = None) -> None:
        self.rank = rank
        self.pointer = pointer
        self.clock = clock
        self.started = process_start_time()
        self.folder: Path | None = None
        self.reports = 0  # lines written (tests and curiosity)
        self._last: tuple[int, float] | None = None  # the newest log call's (step, time)
        self._reported: tuple[int, float] | None = None  # the last report's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tuitrain-rank", daemon=True)
        self._thread.start()

    def note(self, step: int) -> None:
        """A log call at `step` (a tuple assignment: no lock, no I/O)."""
        if self._last is None or step > self._last[0]:
            self._last = (step, time.perf_counter())
            if self._reported is None:
                self._reported = self._last  # the first row: the step time's start

    def close(self) -> None:
        """The last report, from the thread; waits a little, never long."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * FLUSH_S)

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.report()
        self.report()

    def report(self) -> None:
        """One line for what was logged since the last one (nothing when nothing was)."""
        last, since = self._last, self._reported
        if last is None or since is None or (self.reports and last[0] <= since[0]):
            return
        # read at every report, not once: a pointer a crashed job left (same job key, written
        # just before this process started) gives way to this job's rank 0's when it writes;
        # once rank 0 removed its own at finish, the folder it named stays the one
        self.folder = read_pointer(self.pointer, self.started) or self.folder
        if self.folder is None:
            return  # rank 0 has not named its run dir (yet, or not on this node)
        step_time = (last[1] - since[1]) / (last[0] - since[0]) if last[0] > since[0] else None
        entry = {
            "step": last[0],
            "step_time_s": step_time,
            "busy_s": self.clock.busy(since, last) if self.clock is not None else None,
            "host_rss_bytes": host_rss_bytes(),
            "mem_peak_bytes": cuda_peak_bytes(),
        }
        if not append_report(self.folder, self.rank, (json.dumps(entry) + "\n").encode()):
            return  # quiet: the figures of this rank stay null in the run
        self._reported = last
        if self.clock is not None:
            self.clock.release(last[1])  # the next report's interval starts there
        self.reports += 1


class RankReader:
    """Rank 0's side: reads the other ranks' new lines at its flush and puts each rank's
    newest figures at or before a train record's step into that record."""

    def __init__(self, folder: Path, world: int) -> None:
        self.folder = folder
        self.world = world
        self._offsets = [0] * world
        self._tails = [b""] * world
        self._pending: list[list[dict[str, Any]]] = [[] for _ in range(world)]
        self._current: list[tuple[dict[str, Any], float] | None] = [None] * world
        self._heard = False  # some rank reported: from then on each record carries the lists

    def poll(self) -> None:
        for rank in range(1, self.world):
            data = read_report(self.folder, rank, self._offsets[rank], MAX_READ_BYTES)
            if data is None:
                continue  # not written yet, or not a file of this user's
            self._offsets[rank] += len(data)
            lines = (self._tails[rank] + data).split(b"\n")
            self._tails[rank] = lines.pop()[-65536:]  # a line still being written
            for line in lines:
                entry = _entry(line)
                if entry is not None and len(self._pending[rank]) < MAX_PENDING:
                    self._pending[rank].append(entry)
                    self._heard = True

    def lists(self, step: int, own: Mapping[str, Any]) -> dict[str, list[float]] | None:
        """The per-rank lists for rank 0's train record at `step` (`own`: rank 0's figures),
        None while no other rank has reported. A rank's entries past `step` wait for a later
        record; a rank without figures for STALE_S (or three of rank 0's steps, if longer) has
        NaN (null in the file)."""
        self.poll()
        if not self._heard:
            return None
        now = time.monotonic()
        # quiet means quieter than the steps are long: a rank reports up to FLUSH_S after it
        # logs, so a record can come before its step's figures, and a 30 s step is no silence
        own_step = own.get("step_time_s")
        stale_s = STALE_S
        if isinstance(own_step, (int, float)) and math.isfinite(own_step):
            stale_s = max(STALE_S, 3.0 * own_step)
        columns: dict[str, list[float]] = {name: [] for name in RANK_FIELDS}
        for rank in range(self.world):
            if rank == 0:
                figures: Mapping[str, Any] | None = own
            else:
                pending = self._pending[rank]
                taken = [e for e in pending if e["step"] <= step]
                if taken:
                    self._current[rank] = (taken[-1], now)
                    self._pending[rank] = [e for e in pending if e["step"] > step]
                held = self._current[rank]
                figures = held[0] if held is not None and now - held[1] <= stale_s else None
            for name in RANK_FIELDS:
                value = (figures or {}).get(name.removeprefix("rank_"))
                if not isinstance(value, (int, float)) or not math.isfinite(value):
                    value = math.nan  # null in the file: no figure from this rank
                elif name.endswith("_bytes"):
                    value = int(value)
                columns[name].append(value)
        if all(math.isnan(v) for v in columns["rank_mem_peak_bytes"]):
            del columns["rank_mem_peak_bytes"]  # no rank on CUDA: the field does not apply
        if all(math.isnan(v) for v in columns["rank_busy_s"]):
            del columns["rank_busy_s"]  # no rank's collectives timed: the step times show
        return columns


def _entry(line: bytes) -> dict[str, Any] | None:
    """One report read back: a step and numbers, anything else skipped."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    step = entry.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    out: dict[str, Any] = {"step": step}
    for name in ("step_time_s", "busy_s", "host_rss_bytes", "mem_peak_bytes"):
        value = entry.get(name)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        out[name] = value if ok and math.isfinite(float(value or 0)) else None
    return out
