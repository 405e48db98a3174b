"""Every rank's figures in rank 0's run: the other ranks of a torchrun job report to it.

Under torchrun each rank may call `tuitrain.init`/`log`; rank 0 writes the job's one run and
the others (`OtherRankRun`) write no run of their own. They do report what rank 0 cannot see:
their step time (measured between log calls, as rank 0's run measures its own) and their
memory (host RSS; the CUDA allocator's peak where the script has initialised CUDA). Rank 0
puts them beside its own in its train records as the per-rank lists the hosted engine writes
under DDP (`rank_step_time_s`, `rank_host_rss_bytes`, `rank_mem_peak_bytes`).

The transport is files, because a file can neither block nor end the job: each other rank
appends one JSON line a flush (every FLUSH_S seconds, when it logged since the last) to
`<rank 0's run dir>/ranks/rank-<N>.jsonl`, and rank 0 reads what is new at its own flush. The
other ranks learn rank 0's run dir from a pointer file rank 0 writes atomically at init,
`<runs folder>/.tuitrain-jobs/<job>.json`: the runs folder is the parent of the run dir every
rank was given (TUITRAIN_RUN_DIR under `tuitrain run`, the `run_dir` argument, else `runs/`),
and the job is named by torchrun's TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,
MASTER_PORT and the run's number in its process (so a k-fold loop's runs stay apart). A rank
looks for the pointer at each flush and never waits for it; one left by an older job (older
than this process) is ignored; rank 0 removes its pointer at finish. Ranks on another node
without a shared filesystem never find it: their figures stay null, and nothing is said.

torchrun's c10d TCPStore would reach every node, but it is the job's own: the script's
process group holds it, a store call that meets a missing key waits for the group's timeout,
and rank 0's store outliving the workers is torchrun's business, not ours. Files cost the job
nothing when they fail.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuitrain.rundir import manifest

RANKS_DIR = "ranks"  # in rank 0's run dir: rank-<N>.jsonl, one per other rank
POINTER_DIR = ".tuitrain-jobs"  # beside the runs: <job>.json names rank 0's run dir
FLUSH_S = 1.0  # how often another rank reports (when it logged since the last report)
STALE_S = 10.0  # a rank's figures older than this and 3 steps (rank 0's clock) are null: quiet
MAX_READ_BYTES = 1 << 20  # what rank 0 reads of one rank's file at one flush
MAX_PENDING = 10_000  # entries held per rank waiting for rank 0's rows to reach their step
START_SLACK_S = 60.0  # a pointer this much older than this process is an older job's
RANK_FIELDS = ("rank_step_time_s", "rank_host_rss_bytes", "rank_mem_peak_bytes")

_runs = 0  # the runs init started in this process on any rank: the job key's last part


def world_size() -> int:
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1") or 1), 1)
    except ValueError:
        return 1


def next_job_key() -> str | None:
    """The name every rank of this torchrun job gives its next run (the same on each rank
    when each calls init as often), or None outside a job of several ranks."""
    global _runs
    if world_size() < 2:
        return None
    _runs += 1
    parts = [os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                                             "MASTER_ADDR", "MASTER_PORT")]  # fmt: skip
    if not parts[0] and not parts[3]:
        return None  # nothing names the job: no pointer
    text = "-".join([*parts, str(_runs)])
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:200]


def pointer_path(run_dir: str | os.PathLike[str] | None, name: str, key: str) -> Path:
    """Where rank 0's pointer for job `key` lies: beside the folder every rank was given."""
    forced = os.environ.get("TUITRAIN_RUN_DIR")
    base = Path(forced) if forced else Path(run_dir) if run_dir else manifest.default_name(name)
    return manifest.named(base).parent / POINTER_DIR / f"{key}.json"


def write_pointer(path: Path, run_dir: Path) -> bool:
    """Rank 0: name its run dir for the other ranks (atomically); False when it cannot."""
    from tuitrain.core.safefile import write_atomic_text

    text = json.dumps({"run_dir": os.path.abspath(run_dir), "time": time.time(),
                       "pid": os.getpid(), "host": socket.gethostname()})  # fmt: skip
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic_text(path, text)
    except Exception:  # noqa: BLE001 - a read-only folder: the ranks' figures stay null
        return False
    return True


def remove_pointer(path: Path, run_dir: Path) -> None:
    """Rank 0 at finish: its pointer, if it is still its own, and its run dir's `ranks/`
    folder if no rank wrote there (a job that logged from rank 0 only)."""
    with contextlib.suppress(Exception):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
    with contextlib.suppress(OSError):
        (run_dir / RANKS_DIR).rmdir()  # only when empty


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


def read_pointer(path: Path, started: float | None) -> Path | None:
    """The run dir rank 0's pointer names, when it is there and of this job."""
    from tuitrain.core.safefile import open_regular

    try:
        with open_regular(path, "rb") as f:
            entry = json.loads(f.read(65536))
        folder, written = entry["run_dir"], float(entry["time"])
    except Exception:  # noqa: BLE001 - not there yet, half a file, anything odd
        return None
    if not isinstance(folder, str) or (started is not None and written < started - START_SLACK_S):
        return None
    ranks = Path(folder) / RANKS_DIR
    return ranks if ranks.is_dir() and not ranks.is_symlink() else None


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
    from a daemon thread, appends its figures to its file in rank 0's run dir."""

    def __init__(self, rank: int, pointer: Path) -> None:
        self.rank = rank
        self.pointer = pointer
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
        from tuitrain.client.core import host_rss_bytes

        entry = {"step": last[0], "step_time_s": step_time, "host_rss_bytes": host_rss_bytes(),
                 "mem_peak_bytes": cuda_peak_bytes()}  # fmt: skip
        try:
            fd = os.open(self.folder / f"rank-{self.rank}.jsonl",
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # fmt: skip
            try:
                os.write(fd, (json.dumps(entry) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            return  # quiet: the figures of this rank stay null in the run
        self._reported = last
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
        from tuitrain.core.safefile import open_regular

        for rank in range(1, self.world):
            try:
                with open_regular(self.folder / f"rank-{rank}.jsonl", "rb") as f:
                    f.seek(self._offsets[rank])
                    data = f.read(MAX_READ_BYTES)
            except Exception:  # noqa: BLE001 - not written yet, or not a file
                continue
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
    for name in ("step_time_s", "host_rss_bytes", "mem_peak_bytes"):
        value = entry.get(name)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        out[name] = value if ok and math.isfinite(float(value or 0)) else None
    return out
