"""The files through which a script's other ranks report to rank 0 (`tuitrain.client.ranks`
keeps the logic): rank 0's pointer beside the runs folder, and each rank's reports in rank
0's run dir.

- The pointer, `<runs folder>/.tuitrain-jobs/<job key>.json`, names rank 0's run dir: one
  small JSON object, written whole (a temp name made with O_EXCL | O_NOFOLLOW, mode 0600,
  renamed into place: a link or anything else planted under the name is replaced, never
  written through).
- The reports, `<run dir>/ranks/rank-<N>.jsonl`, one JSON line per report: made the same way
  at the first report (its first line in it), appended to later with O_APPEND | O_NOFOLLOW.

The runs folder may be shared with other users (a `runs/` on a shared filesystem), so every
read here opens without following a link and without blocking (O_NOFOLLOW | O_NONBLOCK),
takes only a regular file of this user's (fstat), and reads a bounded number of bytes: a FIFO
planted as the pointer cannot hang rank 0's finish, a link cannot lead a rank to read or
append to another file, and a stranger's pointer is never followed. Anything odd is skipped
quietly: these files carry figures, and a figure that cannot travel is null.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import time
from pathlib import Path

from tuitrain.core.safefile import NOFOLLOW, temp_beside, write_atomic_bytes
from tuitrain.rundir import manifest
from tuitrain.rundir.layout import RunDir

POINTER_DIR = ".tuitrain-jobs"  # beside the runs: <job key>.json names rank 0's run dir
MAX_POINTER_BYTES = 65536
START_SLACK_S = 60.0  # a pointer this much older than the reading process is an older job's


def pointer_path(run_dir: str | os.PathLike[str] | None, name: str, key: str) -> Path:
    """Where rank 0's pointer for job `key` lies: beside the folder every rank was given
    (TUITRAIN_RUN_DIR under `tuitrain run`, the `run_dir` argument, else `runs/<name>-...`)."""
    forced = os.environ.get("TUITRAIN_RUN_DIR")
    base = Path(forced) if forced else Path(run_dir) if run_dir else manifest.default_name(name)
    return manifest.named(base).parent / POINTER_DIR / f"{key}.json"


def read_own(path: Path, limit: int, offset: int = 0) -> bytes | None:
    """Up to `limit` bytes of `path` from `offset`, when it is a regular file of this user's;
    None for anything else (missing, a link, a FIFO, a device, a stranger's file), at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        return os.pread(fd, limit, offset)
    except OSError:
        return None
    finally:
        os.close(fd)


def write_pointer(path: Path, run_dir: Path) -> bool:
    """Rank 0: name its run dir for the other ranks (whole, mode 0600); False when it
    cannot."""
    text = json.dumps({"run_dir": os.path.abspath(run_dir), "time": time.time(),
                       "pid": os.getpid(), "host": socket.gethostname()})  # fmt: skip
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic_bytes(path, text.encode(), perm=0o600)
    except Exception:  # noqa: BLE001 - a read-only folder, a directory there: figures null
        return False
    return True


def _pointer(path: Path) -> dict[str, object] | None:
    data = read_own(path, MAX_POINTER_BYTES)
    try:
        entry = json.loads(data) if data else None
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def read_pointer(path: Path, started: float | None) -> Path | None:
    """The `ranks/` folder of the run dir rank 0's pointer names, when the pointer is there,
    this user's, and of this job (not older than `started`, the reader's start, less
    START_SLACK_S); never a link."""
    entry = _pointer(path)
    if entry is None:
        return None
    folder, written = entry.get("run_dir"), entry.get("time")
    if not isinstance(folder, str) or not isinstance(written, (int, float)):
        return None
    if started is not None and written < started - START_SLACK_S:
        return None
    ranks = RunDir(folder).ranks
    return ranks if ranks.is_dir() and not ranks.is_symlink() else None


def remove_pointer(path: Path, run_dir: Path) -> None:
    """Rank 0 at finish: its pointer, if it is still its own (never waits on what lies
    there), and its run dir's `ranks/` folder if no rank wrote there (a job that logged from
    rank 0 only)."""
    entry = _pointer(path)
    if entry is not None and entry.get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            path.unlink()
    with contextlib.suppress(OSError):
        RunDir(run_dir).ranks.rmdir()  # only when empty


def report_path(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank}.jsonl"


def append_report(folder: Path, rank: int, line: bytes) -> bool:
    """Another rank: append one report line to its file in `folder` (rank 0's `ranks/`); the
    first one makes the file (whole, mode 0600). False when it cannot: a link, anything but a
    regular file of this user's, a full disk."""
    path = report_path(folder, rank)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | NOFOLLOW)
    except FileNotFoundError:
        return _first_report(path, line)
    except OSError:
        return False  # a link (ELOOP), a FIFO nobody reads (ENXIO), a directory...
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        os.write(fd, line)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _first_report(path: Path, line: bytes) -> bool:
    temp = temp_beside(path)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        os.rename(temp, path)  # only this rank writes its file: whatever else is there goes
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return False
    return True


def read_report(folder: Path, rank: int, offset: int, limit: int) -> bytes | None:
    """Rank 0: up to `limit` bytes of rank `rank`'s reports from `offset`; None when there is
    no regular file of this user's there (not written yet, a link, a FIFO...)."""
    return read_own(report_path(folder, rank), limit, offset)
