"""The run dir's lock: one writer per run dir, and whether the writer of a run is gone.

Rank 0 (or the only process) holds RUN_DIR/.tuitrain.lock exclusively for the run's life,
its pid and host inside; a DDP job's other ranks hold .tuitrain.ranks.lock shared. flock
locks go with the process: a killed run leaves no stale lock behind."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

from tuitrain.core.errors import UserError
from tuitrain.core.safefile import open_nofollow
from tuitrain.rundir.layout import LOCK_NAME, RANKS_LOCK_NAME


def _held_message(run_dir: Path, holder: str) -> str:
    holder = (holder.split() or ["another process"])[0] if holder != "another process" else holder
    return (
        f"run dir {run_dir} is in use by a running tuitrain (pid {holder}); "
        "stop that run first, or pass another --run-dir."
    )


def refuse_if_held(run_dir: str | Path | None) -> None:
    """RunDirLock's refusal, said before torch is imported (~5 s on a small CPU): a shared lock
    taken and given back at once fails only while a run holds its exclusive one. A probe, not
    a hold: the run still takes RunDirLock later, so a run that starts in between is caught
    there. A missing, unreadable or linked lock file, or one that is not a regular file, is left
    to RunDirLock."""
    import fcntl
    import stat

    if not run_dir:
        return
    path = Path(run_dir).expanduser()
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:  # O_NONBLOCK: a planted FIFO must not hang the start
        fd = os.open(path / LOCK_NAME, flags)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return  # a directory, a FIFO, a device: RunDirLock says what is wrong with it
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.read(fd, 64).decode("utf-8", "replace").strip()
            raise UserError(_held_message(path, holder or "another process")) from None
        except OSError:
            return
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def writer_gone(run_dir: str | Path) -> bool:
    """True when the run dir's lock file exists and no process holds it: the run that wrote
    there has exited (a writer holds an exclusive flock for its whole life; the kernel drops
    it when the process dies, by kill -9 or the OOM killer alike). False when it is held, or
    when there is no lock file to tell (a run from an older tuitrain, a copied folder).
    Non-blocking, a regular file only: a viewer never waits on it."""
    import fcntl
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(Path(run_dir) / LOCK_NAME, flags)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        words = os.read(fd, 256).decode("utf-8", "replace").split()
        if len(words) > 1 and words[1] != socket.gethostname():
            return False  # written on another node: a lock there may not show here (NFS)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return False  # held (BlockingIOError): the writer is alive
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


class RunDirLock:
    """One writer per run dir. Rank 0 holds an exclusive lock on RUN_DIR/.tuitrain.lock (its
    pid inside, for the message) and checks that no rank of an earlier job still holds
    .tuitrain.ranks.lock; the other ranks hold that one shared. flock locks go with the
    process: a killed run leaves no stale lock behind."""

    def __init__(self, run_dir: Path, main: bool = True) -> None:
        self.run_dir = run_dir
        self._files: list[Any] = []
        if main:
            self._take(LOCK_NAME, exclusive=True)
            self._check_free(RANKS_LOCK_NAME)
        else:
            self._take(RANKS_LOCK_NAME, exclusive=False)

    def _regular(self, name: str) -> Path:
        """RUN_DIR/name, refused in one sentence when something other than a file (or a link,
        which open_nofollow refuses) sits there: a directory, or a FIFO that would hang."""
        import stat

        path = self.run_dir / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return path  # missing (created next) or not looked up: the open says why
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise UserError(
                f"run dir {self.run_dir} holds a {name} that is not a file (tuitrain keeps its "
                f"lock there); remove {path}, or pass another --run-dir."
            )
        return path

    def _take(self, name: str, exclusive: bool) -> None:
        import fcntl

        path = self._regular(name)
        f = open_nofollow(path, "a+", encoding="utf-8")  # held until release()
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        try:
            for attempt in range(5):  # another start's probe holds it for microseconds
                try:
                    fcntl.flock(f, mode)
                    break
                except BlockingIOError:
                    if attempt == 4:
                        raise
                    time.sleep(0.01)
        except BlockingIOError as exc:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise UserError(_held_message(self.run_dir, holder)) from exc
        if exclusive:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()} {socket.gethostname()}")  # the host: see writer_gone
            f.flush()
        self._files.append(f)

    def _check_free(self, name: str) -> None:
        """An exclusive lock on `name` taken and given back at once: no rank holds it."""
        import fcntl

        try:
            path = self._regular(name)
        except UserError:
            self.release()
            raise
        with open_nofollow(path, "a+", encoding="utf-8") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                self.release()
                raise UserError(
                    f"run dir {self.run_dir} is in use by ranks of an earlier DDP job that "
                    "still run; stop them first (pkill -f 'tuitrain'), or pass another --run-dir."
                ) from exc
            fcntl.flock(f, fcntl.LOCK_UN)

    def release(self) -> None:
        for f in self._files:
            with contextlib.suppress(OSError, ValueError):
                f.close()
        self._files.clear()
