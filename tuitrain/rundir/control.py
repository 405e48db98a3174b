"""The control channel: how `tuitrain watch` steers a run that tuitrain hosts elsewhere.

A hosted run (the dashboard's engine thread, or a headless run) makes `RUN_DIR/control/`,
a directory of its own user's with mode 0700, marks it as its own (`control/owner`: the pid
and host of the process that reads it, as its lock file names them, and a random token), and
removes it when the run ends, however it ends. A viewer of the same user drops one request
file there per command (`send_request`: written under a temporary name with O_EXCL |
O_NOFOLLOW, mode 0600, then renamed into place, so the host never reads half a request).
The host (`Inbox.take`, polled by `tuitrain.host.steer`) reads and deletes them and applies
them to the run's `Control`, which the engine reads at its next step boundary, as it reads a
key of the dashboard. It answers each request with an event record (kind "control") in
the run's metrics file, which the viewer follows.

Only the run's own user can steer it:
- the directory is made with mode 0700 and checked (lstat: a real directory, not a link,
  owned by the host's user, no access for group or others) when it is opened, and again
  (fstat of the descriptor it was opened with) before every read: a directory replaced or
  opened up after the start is refused, and nothing in it is obeyed;
- the host lists the directory it opened, not its path: a directory put in its place later
  (by whoever may write in the run dir) is never read;
- each request is opened with O_NOFOLLOW | O_NONBLOCK relative to that descriptor and must
  be a regular file of the host's user, with one link (no hard link to another file) and
  at most MAX_REQUEST_BYTES; anything else is deleted, unread, and answered as refused;
- the viewer checks the directory the same way before it writes (a directory of another
  user is never written to), and offers its keys only while the run dir's lock is held by
  a live process, the directory passes the checks, and its owner mark names that process
  (`steerable`): a directory a killed run left behind, under a later run that reads no
  requests (a script's, `tuitrain run`), is stale and offers nothing.
A new writer of the run dir, hosted or a script, removes a stale directory once it holds the
lock (`remove_stale`). Requests already there when a run opens the directory (a previous
run's, in the same run dir) are dropped unread. An entry that cannot be deleted (a directory
under a request's name) is refused once, then left alone: never read or refused again.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuitrain.rundir.layout import CONTROL_DIR as CONTROL_DIR  # named here for its users
from tuitrain.rundir.layout import RunDir
from tuitrain.rundir.lock import live_holder, writer_id

OWNER_NAME = "owner"  # "<pid> <host> <start> <token>" of the run that reads the directory
MAX_OWNER_BYTES = 256
_marks: set[str] = set()  # the owner marks of the inboxes open in this process
REQUEST_PREFIX = "req-"
REQUEST_SUFFIX = ".json"
TEMP_PREFIX = ".tmp-"
MAX_REQUEST_BYTES = 4096
MAX_PROFILE_STEPS = 1000
COMMANDS = ("pause", "resume", "checkpoint", "profile", "stop")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class ChannelError(Exception):
    """The channel cannot be used: one sentence saying why."""


@dataclass(frozen=True, slots=True)
class Request:
    """One command read from the channel; `refused` says why it is not obeyed (or "")."""

    command: str
    id: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    refused: str = ""


def channel_dir(run_dir: str | Path) -> Path:
    return RunDir(run_dir).control


def why_unsafe(st: os.stat_result) -> str:
    """Why a directory with this stat is no channel (or ""): its kind, owner and mode."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return f"it belongs to user id {st.st_uid}, not to this user ({os.geteuid()})"
    if st.st_mode & 0o077:
        return f"its mode is {stat.S_IMODE(st.st_mode):04o}: others may write in it (want 0700)"
    return ""


def _open_dir(folder: Path) -> int | None:
    """A descriptor of `folder` when it is a channel of this user's (see why_unsafe)."""
    try:
        fd = os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    except OSError:
        return None
    try:
        if not why_unsafe(os.fstat(fd)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _owner(dir_fd: int) -> str:
    """The owner mark in the directory `dir_fd` ("" when there is none, or it is no regular
    file of this user's): read without following a link or blocking on a FIFO."""
    try:
        fd = os.open(OWNER_NAME, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return ""
        return os.read(fd, MAX_OWNER_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def _same_writer(mark: str, holder: str | None) -> bool:
    """The owner mark ("<writer_id> <token>") was written by the lock's holder."""
    if holder is None:
        return False
    words, held = mark.split(), holder.split()
    return len(held) >= 2 and len(words) > len(held) and words[: len(held)] == held


def steerable(run_dir: str | Path) -> bool:
    """True when a live hosted run listens on `run_dir`'s channel and this user may write to
    it: the directory passes the checks, a live process holds the run dir's lock, and the
    directory's owner mark names that process. What a viewer checks before offering the keys
    that steer."""
    fd = _open_dir(channel_dir(run_dir))
    if fd is None:
        return False
    try:
        mark = _owner(fd)
    finally:
        os.close(fd)
    return _same_writer(mark, live_holder(run_dir))


def remove_stale(run_dir: str | Path) -> None:
    """A new writer of `run_dir`, once it holds the lock: remove a control directory that no
    live run reads (its owner mark names another process, or it has none), as far as it can
    (its mark first: a directory with entries that cannot be deleted stays, unmarked, and is
    never steerable). A directory that is not this user's own is left alone (no viewer writes
    there, no run reads it)."""
    folder = channel_dir(run_dir)
    fd = _open_dir(folder)
    if fd is None:
        return
    try:
        if _owner(fd) in _marks:
            return  # this process's own (an Inbox opened before its lock)
        names = sorted(os.listdir(fd), key=lambda name: name != OWNER_NAME)
        for name in names:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
    except OSError:
        return
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def send_request(run_dir: str | Path, command: str, **fields: Any) -> str:
    """Drop one request in `run_dir`'s channel (atomically); its id, or ChannelError."""
    if command not in COMMANDS:
        raise ChannelError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
    folder = channel_dir(run_dir)
    try:
        dir_fd = os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    except OSError as exc:
        raise ChannelError(
            f"{folder} cannot be opened ({exc.strerror}): the run is not listening"
        ) from None
    try:
        if why := why_unsafe(os.fstat(dir_fd)):
            raise ChannelError(f"{folder} is no control channel to write to: {why}")
        request_id = f"{time.time_ns():x}-{secrets.token_hex(4)}"
        body = json.dumps({"command": command, "id": request_id, "pid": os.getpid(), **fields})
        data = body.encode()
        if len(data) > MAX_REQUEST_BYTES:
            raise ChannelError("the request is too long")
        temp = f"{TEMP_PREFIX}{request_id}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
        fd = os.open(temp, flags, 0o600, dir_fd=dir_fd)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        final = f"{REQUEST_PREFIX}{request_id}{REQUEST_SUFFIX}"
        os.rename(temp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return request_id
    except OSError as exc:
        raise ChannelError(f"could not write a request in {folder} ({exc.strerror})") from None
    finally:
        os.close(dir_fd)


class Inbox:
    """The host's end: makes (or checks) the directory, then reads and deletes requests."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = channel_dir(run_dir)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.path, 0o700)
        try:
            fd = os.open(self.path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
        except OSError as exc:
            reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise ChannelError(
                f"{self.path} cannot be used as a control channel: {reason}"
            ) from None
        if why := why_unsafe(os.fstat(fd)):
            os.close(fd)
            raise ChannelError(f"{self.path} cannot be used as a control channel: {why}")
        self.fd: int | None = fd
        self.stuck: set[str] = set()  # entries that could not be deleted: left alone
        self.mark = ""  # what control/owner says: "<pid> <host> <start> <token>"
        for name in self._names():  # a previous run's requests are not this run's
            self._remove(name)
        self._mark()

    def _mark(self) -> None:
        """The owner mark: this process's pid and host and a token of this inbox's (a pid
        reused later is not this inbox), written whole (a temp file renamed)."""
        assert self.fd is not None
        self.mark = f"{writer_id()} {secrets.token_hex(8)}"
        temp = f"{TEMP_PREFIX}{OWNER_NAME}-{secrets.token_hex(4)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
        try:
            fd = os.open(temp, flags, 0o600, dir_fd=self.fd)
            try:
                os.write(fd, self.mark.encode())
            finally:
                os.close(fd)
            os.rename(temp, OWNER_NAME, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            _marks.add(self.mark)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self.fd)
            self.close()
            why = f"{self.path} cannot be marked as this run's ({exc.strerror})"
            raise ChannelError(why) from None

    def _names(self) -> list[str]:
        if self.fd is None:
            return []
        try:
            return sorted(os.listdir(self.fd))
        except OSError:
            return []

    def _remove(self, name: str) -> bool:
        """Delete `name`; False (and remembered in `stuck`) when it cannot be deleted."""
        if self.fd is None:
            return False
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError:
            self.stuck.add(name)
            return False
        return True

    def take(self) -> list[Request]:
        """The requests waiting now, oldest first, each deleted once read; a refused one
        carries its reason. A directory that no longer passes the checks closes the inbox
        (one refusal says why) and its files are left unread."""
        if self.fd is None:
            return []
        if why := why_unsafe(os.fstat(self.fd)):
            self.close(remove=False)
            return [Request("", "", refused=f"the control channel was closed: {why}")]
        out = []
        names = self._names()
        self.stuck &= set(names)  # gone since: forgotten
        for name in names:
            if not (name.startswith(REQUEST_PREFIX) and name.endswith(REQUEST_SUFFIX)):
                continue  # a temp file being written, the owner mark, a stranger: no request
            if name in self.stuck:
                continue  # refused once already
            request = self._read(name)
            if not self._remove(name):  # obeyed at every poll, were it kept: refused, once
                why = request.refused or f"request {name}"
                request = Request(
                    request.command, request.id,
                    refused=f"{why}; it cannot be deleted, and is left there unread from now on",
                )  # fmt: skip
            out.append(request)
        return out

    def _read(self, name: str) -> Request:
        request_id = name[len(REQUEST_PREFIX) : -len(REQUEST_SUFFIX)][:64]
        assert self.fd is not None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            why = "it is a symbolic link" if exc.errno == errno.ELOOP else str(exc.strerror)
            return Request("", request_id, refused=f"request {name}: {why}")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return Request("", request_id, refused=f"request {name} is not a regular file")
            if st.st_uid != os.geteuid():
                return Request("", request_id, refused=f"request {name} is user {st.st_uid}'s")
            if st.st_nlink != 1:
                return Request("", request_id, refused=f"request {name} has other links")
            data = os.read(fd, MAX_REQUEST_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_REQUEST_BYTES:
            return Request("", request_id, refused=f"request {name} is too long")
        return parse_request(data, request_id)

    def close(self, remove: bool = True) -> None:
        """Stop listening; with `remove`, delete what is left and the directory itself."""
        if self.fd is None:
            return
        _marks.discard(self.mark)
        if remove:
            for name in self._names():
                self._remove(name)
            with contextlib.suppress(OSError):
                os.rmdir(self.path)
        os.close(self.fd)
        self.fd = None


def parse_request(data: bytes, request_id: str) -> Request:
    """A request from its file's bytes; refused when it is no known command."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return Request("", request_id, refused="the request is not JSON")
    if not isinstance(body, dict):
        return Request("", request_id, refused="the request is not a JSON object")
    command = body.get("command")
    if command not in COMMANDS:
        return Request("", request_id, refused=f"unknown command {str(command)[:40]!r}")
    fields: dict[str, Any] = {}
    if command == "profile":
        steps = body.get("steps")
        if not isinstance(steps, int) or isinstance(steps, bool):
            return Request(command, request_id, refused="profile needs a whole number of steps")
        if not 1 <= steps <= MAX_PROFILE_STEPS:
            return Request(command, request_id, refused=f"profile steps {steps} out of range")
        fields["steps"] = steps
    pid = body.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        fields["pid"] = pid
    return Request(str(command), request_id, fields)
