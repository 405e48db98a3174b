"""Which run dir a client run writes, and how `tuitrain run` learns of each one.

Every run gets a folder of its own, made with one atomic `mkdir`: `runs/<name>-<stamp>`
when nothing names it, and `<that>-2`, `-3` ... when the name is taken (two runs started
in the same second, by this process or another). A folder this process already wrote a run
to and finished is not reused either: the next run asking for it gets `<dir>-2` (a k-fold
loop that passes the same run_dir, wandb's `dir=`; while that run is open, its lock refuses
a second writer as before).

Under `tuitrain run -- CMD` (TUITRAIN_RUN_DIR=D) the first run of the script writes D, where
the dashboard looks first; each later run, from the same process or from another one the
script started, writes a fresh `D-2`, `D-3` ... beside it. The runs are listed, in the order
they started, in D/MANIFEST_NAME: one JSON object a line, `{"run": N, "dir": NAME, "pid":
PID}`, NAME a folder beside D (D's own name for run 1). The parent empties the file when it
starts the script; a client appends its line under an flock on the file, after making its
folder and before writing a record, so the parent, which reads the whole lines, knows a run
dir before any metrics file in it is open. A client that cannot use the manifest (a
read-only D, something other than a file there) falls back to this process's count: its
first run writes D, later ones a fresh sibling.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tuitrain.rundir.layout import MANIFEST_NAME, fresh_dir

MANIFEST_MAX_BYTES = 1 << 20  # the parent reads at most this much of it (~10,000 runs)
LOCK_WAIT_S = 5.0  # a client waits this long for the manifest's flock (held for microseconds)

_used: set[str] = set()  # run dirs this process has finished a run in (absolute paths)
_forced_runs = 0  # runs this process started under TUITRAIN_RUN_DIR without the manifest


def default_name(name: str) -> Path:
    return Path("runs") / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def named(path: Path) -> Path:
    """`path`, or its absolute form where it has no name of its own (`.`, `..`): the form
    whose siblings `<name>-2` ... can be named."""
    return path if path.name not in ("", "..") else path.resolve()


def note_used(path: Path) -> None:
    _used.add(os.path.abspath(path))


def chosen_dir(run_dir: str | os.PathLike[str] | None, name: str) -> tuple[Path, str | None]:
    """(the run dir for a run started directly, a note on why it is not the one asked for):
    `run_dir` as given unless this process wrote a run there already (then a fresh sibling),
    else a fresh `runs/<name>-<stamp>`."""
    if run_dir is None:
        return fresh_dir(default_name(name)), None
    path = Path(run_dir)
    if os.path.abspath(path) not in _used:
        path.mkdir(parents=True, exist_ok=True)
        return path, None
    fresh = fresh_dir(path, first=2)
    return fresh, (
        f"run_dir {str(path)!r:.300} holds an earlier run of this process; this run is"
        f" written to {str(fresh)!r:.300} (one run, one folder)"
    )


def forced_dir(forced: Path) -> tuple[Path, int]:
    """(the run dir, the run's number) for a run under `tuitrain run` (TUITRAIN_RUN_DIR)."""
    global _forced_runs
    forced.mkdir(parents=True, exist_ok=True)
    try:
        with _manifest_locked(forced) as f:
            f.seek(0)
            taken = sum(1 for line in f.read(MANIFEST_MAX_BYTES).splitlines() if line.strip())
            path = forced if taken == 0 else fresh_dir(named(forced), first=2)
            f.seek(0, os.SEEK_END)
            f.write(json.dumps({"run": taken + 1, "dir": path.name, "pid": os.getpid()}) + "\n")
            f.flush()
            return path, taken + 1
    except OSError:
        _forced_runs += 1
        path = forced if _forced_runs == 1 else fresh_dir(named(forced), first=2)
        return path, _forced_runs


@contextlib.contextmanager
def _manifest_locked(forced: Path) -> Any:
    import fcntl

    from tuitrain.core.safefile import open_nofollow

    f = open_nofollow(forced / MANIFEST_NAME, "a+", encoding="utf-8")
    try:
        if not _regular(f):
            raise OSError(f"{forced / MANIFEST_NAME} is not a regular file")
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        yield f
    finally:
        f.close()  # the flock goes with it


def _regular(f: Any) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(f.fileno()).st_mode)


def start_manifest(run_dir: Path) -> None:
    """The parent, before starting the script: an empty manifest (an earlier `tuitrain run`
    in this dir left its own), never through a link."""
    from tuitrain.core.safefile import open_nofollow

    with open_nofollow(run_dir / MANIFEST_NAME, "w", encoding="utf-8") as f:
        if not _regular(f):
            raise OSError(f"{run_dir / MANIFEST_NAME} is not a regular file")


def read_manifest(run_dir: Path) -> list[Path]:
    """The run dirs the manifest lists after `run_dir` itself (runs 2, 3 ...), in order: each
    a plain folder name beside `run_dir`; anything else in it is skipped."""
    from tuitrain.core.safefile import NotRegular, open_regular

    try:
        with open_regular(run_dir / MANIFEST_NAME, "rb") as f:
            data = f.read(MANIFEST_MAX_BYTES)
    except (OSError, NotRegular):
        return []
    out: list[Path] = []
    base = named(run_dir)
    for line in data.split(b"\n")[:-1]:  # whole lines only: the last may be half written
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        name = entry.get("dir") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
            continue
        if name == base.name:
            continue  # run 1: the parent knows it
        path = base.parent / name
        if path not in out:
            out.append(path)
    return out
