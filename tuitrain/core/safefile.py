"""Files a run creates in its run dir, opened without following symbolic links.

A run dir may lie in a shared place (/tmp, a shared filesystem). A link planted there under a
name tuitrain writes (the metrics file, the train log, a temp file) would have the run truncate or
append to the link's target, any file its user can write. Every file in a run dir is opened
with O_NOFOLLOW (a link as the last component is refused: ELOOP), and temp files are created
with O_EXCL under a name of their own (nothing already there, link or file, is reused).

Nothing blocks on a special file: every open here is non-blocking at first (a FIFO opens at
once) and anything but a regular file (a FIFO, a device, a socket, a directory) is refused
in one sentence (NotRegular, exit 2) before a byte is read or written. `open_regular` and
`read_regular_text` do the same for files tuitrain reads (links followed there).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tuitrain.core.errors import UserError

_FLAGS = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class LinkRefused(UserError):
    """A file tuitrain was about to write is a symbolic link (exit 2)."""


class NotRegular(UserError):
    """A path where tuitrain reads or writes a file holds a FIFO, a device, a socket or a
    directory (exit 2). Opening a FIFO blocks until a peer comes; a device never ends."""


def kind_of(mode: int) -> str:
    """What a stat mode is, in words: 'a directory', 'a FIFO (named pipe)'..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def not_regular(path: Path | str, mode: int, fix: str = "") -> NotRegular:
    """The one-sentence refusal for `path`, which is something other than a regular file."""
    fix = fix or "remove or rename it, or pass another path"
    return NotRegular(f"{path} is {kind_of(mode)}, not a regular file; {fix}.")


def regular_or_missing(path: Path | str, fix: str = "") -> bool:
    """True when `path` is a regular file (links followed), False when nothing is there; a
    FIFO, device, socket or directory there raises NotRegular (never opened: no hang)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    if not stat.S_ISREG(mode):
        raise not_regular(path, mode, fix)
    return True


def _regular_fd(fd: int, path: Path | str, fix: str) -> int:
    """`fd` made blocking again once fstat says it is a regular file; closed and refused
    otherwise."""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode, fix)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: Path | str, mode: str = "rb", fix: str = "", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for reading ("r" or "rb", links followed) that never blocks on a
    special file: opened with O_NONBLOCK (a FIFO opens at once), then anything but a regular
    file is refused with NotRegular; the returned file blocks as usual."""
    if mode not in ("r", "rb"):
        raise ValueError(f"open_regular reads only, not mode {mode!r}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ENXIO):  # a directory; a socket
            with contextlib.suppress(OSError):
                raise not_regular(path, os.stat(path).st_mode, fix) from None
        raise
    return os.fdopen(_regular_fd(fd, path, fix), mode, **kwargs)


def read_regular_text(path: Path | str, fix: str = "", limit: int | None = None) -> str:
    """The text of a regular file (UTF-8, undecodable bytes replaced); a special file is
    refused (NotRegular); with `limit`, at most that many bytes are read."""
    with open_regular(path, "rb", fix) as f:
        data = f.read() if limit is None else f.read(limit)
    return data.decode("utf-8", errors="replace")


def link_refused(path: Path | str) -> LinkRefused:
    """The one-sentence refusal for a symbolic link where tuitrain writes."""
    return LinkRefused(
        f"{path} is a symbolic link; tuitrain does not write through links (one planted "
        "in a shared folder could point at any of your files): remove it, or pass "
        "another --run-dir."
    )


def open_fd_nofollow(path: Path | str, flags: int, perm: int = 0o644, fix: str = "") -> int:
    """`os.open(path, flags, perm)` refusing a symbolic link (LinkRefused) and anything but a
    regular file (NotRegular), never blocking on a FIFO: a descriptor that blocks as usual."""
    try:  # O_NONBLOCK: a FIFO planted there opens at once (or fails) and is refused below
        fd = os.open(path, flags | NOFOLLOW | os.O_NONBLOCK, perm)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise link_refused(path) from None
        if exc.errno in (errno.EISDIR, errno.ENXIO):  # a directory; a FIFO nobody reads
            with contextlib.suppress(OSError):
                raise not_regular(path, os.stat(path).st_mode, fix) from None
        raise
    return _regular_fd(fd, path, fix)


def open_nofollow(path: Path, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for mode w/a/a+/x (add b for bytes), refusing a symbolic link."""
    fd = open_fd_nofollow(path, _FLAGS[mode.replace("b", "")])
    return os.fdopen(fd, mode.replace("x", "w"), **kwargs)


def temp_beside(path: Path) -> Path:
    """A fresh name for a temp file next to `path` (created with mode 'x', so never reused)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def replacing(path: Path, perm: int = 0o644) -> Iterator[Path]:
    """A new, empty temp file beside `path` (O_EXCL: nothing planted is reused; mode `perm`)
    for the caller to fill, by name or with `open_nofollow(tmp, "w")`; renamed over `path`
    when the block ends (a link at `path` is replaced, never written through), removed when
    it raises."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        mode = os.lstat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # a link is replaced, not followed
            raise not_regular(path, mode)
    tmp = temp_beside(path)
    try:
        os.close(open_fd_nofollow(tmp, _FLAGS["x"], perm))  # the name is ours now
        yield tmp
        if os.path.islink(tmp):  # a writer that goes by name must not have been redirected
            raise LinkRefused(f"{tmp} became a symbolic link while it was written")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_atomic_text(path: Path, text: str) -> Path:
    """Write `text` to a new temp file beside `path`, then rename it over `path`."""
    with replacing(path) as tmp, open_nofollow(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_atomic_bytes(path: Path, data: bytes, perm: int = 0o644) -> Path:
    """Write `data` to a new temp file (mode `perm`) beside `path`, then rename it over
    `path`."""
    with replacing(path, perm) as tmp, open_nofollow(tmp, "wb") as f:
        f.write(data)
    return path
