"""The run dir's lock: one writer per run dir, and whether the writer of a run is gone.

Rank 0 (or the only process) holds RUN_DIR/.tuitrain.lock exclusively for the run's life,
its pid and host inside; a DDP job's other ranks hold .tuitrain.ranks.lock shared. flock
locks go with the process: a killed run leaves no stale lock behind.

The lock files are their user's alone: a new one is made with mode 0600 (O_CREAT | O_EXCL |
O_NOFOLLOW), an older one of this user's is tightened to 0600, and one of another user is
refused in one sentence. Anyone who can open a lock file can flock it, and a lock held by
someone other than the run would block the owner's `--resume` and make a killed run look
alive. So a lock that is held while the pid, host, start tick and pid namespace written in it
name no live process of this user on this host (a pid given to another process since starts
at another tick) is a hostage, not a run (a stranger who opened the file while it was
readable, a child that inherited the descriptor and outlived the run): `writer_gone` says the
writer is gone, and `RunDirLock` takes a fresh lock file (a new inode, renamed over the old
one) and goes on.
A lock written on another host, or in another pid namespace (a container sharing the host's
name), is never judged here (NFS: its holder's lock may not show on this node; a container's
pids are not this namespace's)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

from tuitrain.core.errors import UserError
from tuitrain.core.safefile import NOFOLLOW, open_fd_nofollow, temp_beside
from tuitrain.rundir.layout import LOCK_NAME, RANKS_LOCK_NAME, RunDir

MAX_LOCK_TEXT = 256  # what is read of a lock file: "<pid> <host> <start> <pid namespace>"


def start_ticks(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat's 22nd field),
    as text; "" where there is no /proc or no such process. With the pid it names one
    process: a pid the kernel gave to another process later starts at another tick."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:  # /proc: nothing planted there
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[19].decode() if fields[19].isdigit() else ""
    except (OSError, IndexError):
        return ""


def pid_namespace() -> str:
    """This process's pid namespace (the inode of /proc/self/ns/pid), as text; "" where it
    cannot be read. A pid and its start tick mean something only inside one namespace: a
    writer in a container that shares the host's name has pids of its own."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def writer_id() -> str:
    """What a writer puts in its lock file: "<pid> <host> <start> <pid namespace>" of this
    process (the start tick and the namespace where there is /proc: a later process that got
    the same pid is not the writer, and a pid of another namespace is never judged here)."""
    start, space = start_ticks(os.getpid()), pid_namespace()
    return f"{os.getpid()} {socket.gethostname()} {start or '-'} {space or '-'}"


def _held_message(run_dir: Path, holder: str) -> str:
    holder = (holder.split() or ["another process"])[0] if holder != "another process" else holder
    return (
        f"run dir {run_dir} is in use by a running tuitrain (pid {holder}); "
        "stop that run first, or pass another --run-dir."
    )


def pid_alive(pid: int) -> bool:
    """True when `pid` is a live process of this user on this host. A zombie is no writer
    (it holds no lock), and neither is another user's process that got the pid later."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    if os.path.isdir("/proc/self"):
        try:
            owner = os.stat(f"/proc/{pid}").st_uid
            with open(f"/proc/{pid}/stat", "rb") as f:  # /proc: nothing planted there
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        except (OSError, IndexError):
            return True  # cannot tell: taken for alive (a refusal, never a second writer)
        return owner == os.geteuid() and state not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: not the writer of a lock file of ours
    return True


def is_hostage(text: str) -> bool:
    """True when a held lock's text ("<pid> <host> <start> <pid namespace>") names this host,
    this pid namespace and a pid that is not a live process of this user, or one that started
    at another tick than the writer (the pid was given to another process since): whoever
    holds the lock, it is not the run that wrote it."""
    words = text.split()
    if len(words) < 2 or not words[0].isdigit() or words[1] != socket.gethostname():
        return False  # empty (a run between its open and its write), or another host's
    if len(words) > 3 and words[3] != (pid_namespace() or "-"):
        return False  # written in another pid namespace (a container): its pid is not ours
    pid = int(words[0])
    if not pid_alive(pid):
        return True
    if len(words) > 2 and words[2].isdigit():
        now = start_ticks(pid)
        return bool(now) and now != words[2]
    return False  # an older tuitrain's "<pid> <host>": the live pid is taken for the writer


def probe(run_dir: str | Path) -> tuple[str, str] | None:
    """The lock's state and text: ("free" | "held" | "hostage", "<pid> <host> <start>"), or
    None when there is no regular lock file to tell (missing, a link, a FIFO...).
    Non-blocking: a shared lock taken and given back at once, which fails only while someone
    holds it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW
    try:  # O_NONBLOCK: a planted FIFO must not hang a start or a viewer
        fd = os.open(RunDir(run_dir).lock, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            text = os.read(fd, MAX_LOCK_TEXT).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return ("hostage" if is_hostage(text) else "held", text)
        except OSError:
            return ("held", text)  # no flock here: taken for held, never a second writer
        fcntl.flock(fd, fcntl.LOCK_UN)
        return ("free", text)
    finally:
        os.close(fd)


def refuse_if_held(run_dir: str | Path | None) -> None:
    """RunDirLock's refusal, said before torch is imported (~5 s on a small CPU), when a live
    run holds the lock. A probe, not a hold: the run still takes RunDirLock later, so a run
    that starts in between is caught there. A missing, unreadable or linked lock file, one
    that is not a regular file, and a hostage are left to RunDirLock."""
    if not run_dir:
        return
    path = Path(run_dir).expanduser()
    found = probe(path)
    if found is not None and found[0] == "held":
        raise UserError(_held_message(path, found[1] or "another process"))


def writer_gone(run_dir: str | Path) -> bool:
    """True when the run dir's lock file exists and its writer has exited: no process holds
    it (a writer holds an exclusive flock for its whole life; the kernel drops it when the
    process dies, by kill -9 or the OOM killer alike), or it is a hostage (held, but the pid
    written in it is dead). False when a live writer holds it, when it was written on another
    host, or when there is no lock file to tell (a run from an older tuitrain, a copied
    folder). Non-blocking, a regular file only: a viewer never waits on it."""
    found = probe(run_dir)
    if found is None:
        return False
    state, text = found
    words = text.split()
    if len(words) > 1 and words[1] != socket.gethostname():
        return False  # written on another node: a lock there may not show here (NFS)
    return state in ("free", "hostage")


def live_holder(run_dir: str | Path) -> str | None:
    """The "<pid> <host> <start>" of the live writer holding the run dir's lock; None when nobody
    does, or only a hostage-taker."""
    found = probe(run_dir)
    return found[1] if found is not None and found[0] == "held" else None


class RunDirLock:
    """One writer per run dir. Rank 0 holds an exclusive lock on RUN_DIR/.tuitrain.lock (its
    pid and host inside) and checks that no rank of an earlier job still holds
    .tuitrain.ranks.lock; the other ranks hold that one shared. Both files are this user's,
    mode 0600. A hostage lock (see the module) is replaced by a fresh one."""

    def __init__(self, run_dir: str | Path, main: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self._fds: list[int] = []
        self._busy = lambda holder: _held_message(self.run_dir, holder or "another process")
        if main:
            self._take(LOCK_NAME, exclusive=True)
            self._check_free(RANKS_LOCK_NAME)
        else:
            self._take(RANKS_LOCK_NAME, exclusive=False)

    @classmethod
    def claim(cls, run_dir: str | Path, name: str, busy: Callable[[str], str]) -> RunDirLock:
        """RUN_DIR/name held exclusively by this process, by the run lock's rules (0600,
        this user's, a hostage replaced), its pid and host inside: `tuitrain run`'s claim on
        its run dir. `busy(holder)` is the sentence when a live process holds it."""
        lock = cls.__new__(cls)
        lock.run_dir, lock._fds, lock._busy = Path(run_dir), [], busy
        lock._take(name, exclusive=True)
        return lock

    def _not_a_file(self, name: str) -> UserError:
        return UserError(
            f"run dir {self.run_dir} holds a {name} that is not a file (tuitrain keeps its "
            f"lock there); remove {self.run_dir / name}, or pass another --run-dir."
        )

    def _open(self, name: str) -> int:
        """RUN_DIR/name opened read-write: made new with mode 0600, or an existing regular
        file of this user's (tightened to 0600). A link, a directory, a FIFO or a file of
        another user is refused in one sentence."""
        path = self.run_dir / name
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                raise self._not_a_file(name)  # a FIFO would hang, a directory cannot lock
        try:
            fd = open_fd_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            fd = open_fd_nofollow(path, os.O_RDWR)  # a link: LinkRefused
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise UserError(self._foreign(path, st.st_uid))
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o600)  # an older tuitrain's: others could open and flock it
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _foreign(self, path: Path, uid: int) -> str:
        try:
            import pwd

            who = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
        except (ImportError, KeyError):
            who = f"user id {uid}"
        return (
            f"{path} belongs to {who}, not to you: whoever owns the lock file can hold the run "
            f"dir hostage; remove it (rm {path}), or pass another --run-dir."
        )

    def _take(self, name: str, exclusive: bool) -> None:
        fd = self._open(name)
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        try:
            for attempt in range(5):  # another start's probe holds it for microseconds
                try:
                    fcntl.flock(fd, mode)
                    break
                except BlockingIOError:
                    if attempt == 4:
                        raise
                    time.sleep(0.01)
        except BlockingIOError as exc:
            holder = os.pread(fd, MAX_LOCK_TEXT, 0).decode("utf-8", "replace").strip()
            if exclusive and is_hostage(holder):
                fd = self._fresh(name, fd)
            else:
                os.close(fd)
                raise UserError(self._busy(holder)) from exc
        if exclusive:
            data = writer_id().encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)  # the pid and host: see writer_gone
        self._fds.append(fd)

    def _fresh(self, name: str, hostage: int) -> int:
        """A new lock file, locked and written before it is renamed over the hostage one
        (`hostage`, the descriptor it was judged by, closed here): whoever holds the old inode
        keeps a lock on a file no one opens any more."""
        path = self.run_dir / name
        judged = os.fstat(hostage)
        os.close(hostage)
        temp = temp_beside(path)
        fd = open_fd_nofollow(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, writer_id().encode())
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) != (judged.st_dev, judged.st_ino):
                raise BlockingIOError(errno.EAGAIN, "another run replaced the lock file first")
            os.rename(temp, path)
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) != (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
                raise BlockingIOError(errno.EAGAIN, "another run replaced the lock file after")
        except BaseException as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            if isinstance(exc, OSError):
                raise UserError(self._busy("")) from exc
            raise
        return fd

    def _check_free(self, name: str) -> None:
        """An exclusive lock on `name` taken and given back at once: no rank holds it."""
        try:
            fd = self._open(name)
        except BaseException:
            self.release()
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self.release()
            raise UserError(
                f"run dir {self.run_dir} is in use by ranks of an earlier DDP job that "
                "still run; stop them first (pkill -f 'tuitrain'), or pass another --run-dir."
            ) from exc
        finally:
            os.close(fd)  # closing drops the lock

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
