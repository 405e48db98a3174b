"""What `tuitrain run` samples of the script's process tree (the script cannot report it
cheaply): its processes' resident memory and CPU use, read from /proc, and the GPU memory
they hold and the utilisation of the GPUs they use, from NVML when it is there. Linux only;
elsewhere the sample says it has nothing."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")


@dataclass(slots=True)
class TreeSample:
    processes: int = 0
    rss_bytes: int | None = None
    cpu_pct: float | None = None  # 100 = one core busy
    gpu_mem_bytes: int | None = None
    gpu_util_pct: float | None = None  # the busiest GPU the tree uses

    def text(self) -> str:
        from tuitrain.metrics.format import human_bytes

        if not self.processes:
            return "script tree: not running"
        parts = [f"script tree: {self.processes} process{'es' * (self.processes > 1)}"]
        if self.rss_bytes is not None:
            parts.append(f"RSS {human_bytes(self.rss_bytes)}")
        if self.cpu_pct is not None:
            parts.append(f"CPU {self.cpu_pct:.0f}%")
        if self.gpu_mem_bytes is not None:
            gpu = f"GPU {human_bytes(self.gpu_mem_bytes)}"
            if self.gpu_util_pct is not None:
                gpu += f", {self.gpu_util_pct:.0f}% busy"
            parts.append(gpu)
        return " · ".join(parts)


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime in clock ticks) of a process, or None once it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and parentheses
    try:
        return int(rest[1]), int(rest[11]) + int(rest[12])
    except (IndexError, ValueError):
        return None


def tree_pids(root: int) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in PROC.glob("[0-9]*"):
        with contextlib.suppress(ValueError):
            pid = int(entry.name)
            stat = _stat(pid)
            if stat is not None:
                children.setdefault(stat[0], []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if (PROC / str(pid)).exists():
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


class TreeSampler:
    """Samples a process tree; CPU is the share since the previous sample."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, dict[int, int]] | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []
        with contextlib.suppress(Exception):  # no library, no driver: no GPU figures
            import pynvml

            pynvml.nvmlInit()
            self._handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            self._nvml = pynvml

    def sample(self) -> TreeSample:
        if not PROC.is_dir():
            return TreeSample()
        pids = tree_pids(self.root)
        if not pids:
            return TreeSample()
        rss, ticks = 0, {}
        for pid in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                rss += int((PROC / str(pid) / "statm").read_text().split()[1]) * self._page
            stat = _stat(pid)
            if stat is not None:
                ticks[pid] = stat[1]
        now = time.monotonic()
        cpu = None
        if self._last is not None:
            then, before = self._last
            used = sum(t - before.get(pid, t) for pid, t in ticks.items())
            cpu = 100.0 * used / self._tick / max(now - then, 1e-6)
        self._last = (now, ticks)
        sample = TreeSample(len(pids), rss, cpu)
        self._gpu(sample, set(pids))
        return sample

    def _gpu(self, sample: TreeSample, pids: set[int]) -> None:
        if self._nvml is None:
            return
        used, busiest = 0, None
        for handle in self._handles:
            with contextlib.suppress(Exception):
                procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                mine = [p for p in procs if p.pid in pids]
                if not mine:
                    continue
                used += sum(int(p.usedGpuMemory or 0) for p in mine)
                util = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                busiest = util if busiest is None else max(busiest, util)
        if busiest is not None:
            sample.gpu_mem_bytes, sample.gpu_util_pct = used, busiest


# --------------------------------------------------------------------------- what a script left

CMD_SHOWN = 120  # characters of one leftover process's command line


def _command(pid: int) -> str:
    """A process's command line (NULs as spaces, at most CMD_SHOWN characters), else its name."""
    text = ""
    with contextlib.suppress(OSError), open(PROC / str(pid) / "cmdline", "rb") as f:
        text = f.read(4 * CMD_SHOWN).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if not text:
        with contextlib.suppress(OSError):
            text = "[" + (PROC / str(pid) / "comm").read_text().strip() + "]"
    return text if len(text) <= CMD_SHOWN else text[: CMD_SHOWN - 1] + "…"


def command_line(pid: int) -> str:
    """A process's command line as a leftover-processes event names it."""
    return _command(pid)


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command) of the live processes in process group `pgid` (zombies left out: they
    are already dead). Empty where there is no /proc."""
    found = []
    for entry in PROC.glob("[0-9]*"):
        try:
            pid = int(entry.name)
            text = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        rest = text[text.rfind(")") + 2 :].split()  # state ppid pgrp ...
        if len(rest) > 2 and rest[0] not in ("Z", "X") and rest[2] == str(pgid):
            found.append((pid, _command(pid)))
    return sorted(found)


def files_open_named(pids: list[int], name: str) -> set[str]:
    """The paths of the files named `name` that the processes `pids` hold open (from
    /proc/PID/fd; what cannot be read is left out)."""
    out: set[str] = set()
    for pid in pids:
        fd_dir = PROC / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(fd_dir / fd)
                if target.endswith(" (deleted)"):
                    continue
                if os.path.basename(target) == name:
                    out.add(target)
    return out


# --------------------------------------------------------------------------- what escaped the group


def started(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot), or None once it is gone or a
    zombie. A pid with its start time names one process: a pid used again differs in it."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # state ppid pgrp session ... starttime (20th)
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    try:
        return int(rest[19])
    except ValueError:
        return None


def carrying(name: str, value: str) -> set[tuple[int, int]]:
    """(pid, start) of the live processes of this user whose environment holds `name=value`
    (a variable a parent set for a child: every descendant that kept its environment has it,
    a double-forked one, reparented away, too). Empty where there is no /proc."""
    want, uid, found = f"{name}={value}".encode(), os.getuid(), set()
    for entry in PROC.glob("[0-9]*"):
        try:
            pid = int(entry.name)
            if entry.stat().st_uid != uid:
                continue
            with open(entry / "environ", "rb") as f:
                env = f.read(1 << 20)
        except (OSError, ValueError):
            continue
        if want in env.split(b"\0") and (start := started(pid)) is not None:
            found.add((pid, start))
    return found
