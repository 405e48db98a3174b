"""Plain file-descriptor work for runs with or without a UI (no Textual here).

Keep native stderr (torch's C++ warnings, the profiler's logs) off a dashboard or a rank's
terminal, write a last line that survives a terminal gone away, a stream that drops output
once the terminal hung up (`TerminalOutput`; the UI's driver draws through it, see
`tuitrain.ui.terminal`), and move fds 0-2 off a terminal a detached run outlives.

Textual draws on `sys.__stderr__`. Libraries below Python write to file descriptor 2
directly, which would scribble over the screen. While the app runs, fd 2 points at a log
file and Textual draws through a duplicate of the terminal's descriptor.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tuitrain.core.errors import UserError
from tuitrain.core.safefile import open_nofollow


@contextlib.contextmanager
def native_stderr_to(path: Path) -> Iterator[None]:
    """Send fd 2 to `path` and give `sys.__stderr__` a duplicate of the terminal.

    Enter it before the App is built (Textual reads `sys.__stderr__` then). A no-op when
    stderr is not a terminal (tests, pipes).
    """
    original = sys.__stderr__
    if original is None or not original.isatty():
        yield
        return
    original.flush()
    with open_nofollow(path, "ab") as log:  # refuses a link, a FIFO, a directory, a device
        log_fd = os.dup(log.fileno())
    terminal_fd = os.dup(2)
    terminal = os.fdopen(terminal_fd, "w", encoding=original.encoding, errors=original.errors)
    setattr(sys, "__stderr__", terminal)  # noqa: B010 - typeshed marks it Final
    os.dup2(log_fd, 2)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # EIO: the terminal hung up
            terminal.flush()
        os.dup2(terminal_fd, 2)
        setattr(sys, "__stderr__", original)  # noqa: B010
        with contextlib.suppress(OSError):
            terminal.close()
        os.close(log_fd)


def guard_std_streams() -> None:
    """Started with a standard stream closed (`>&-`, `2>&-`): /dev/null goes on fds 0-2, so
    no file a run opens takes their number (a stray write to fd 1 would land in it), and
    sys.stdout / sys.stderr are streams, never None."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for name in ("stdin", "stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "r" if name == "stdin" else "w"))  # noqa: SIM115


def stdout_gone() -> None:
    """stdout's reader went away (EPIPE: `| head`): what is still buffered, later lines and
    the interpreter's last flush go to /dev/null instead of raising."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def terminal_gone(fds: tuple[int, ...] = (1, 2)) -> bool:
    """True when stdout or stderr is a terminal that hung up (its window closed, its SSH
    session ended) or a pipe whose reader left: poll() says POLLHUP or POLLERR at once. A
    file, /dev/null or a terminal still open: False."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, 0)  # POLLHUP, POLLERR and POLLNVAL come whatever is asked
    dead = select.POLLHUP | select.POLLERR | select.POLLNVAL
    return any(events & dead for _, events in poller.poll(0))


def std_streams_to(path: Path) -> None:
    """The terminal is gone: fds 1 and 2 append to `path` from now on (native code writes
    there too), and what Python still held for the terminal is dropped, not written there
    late. When `path` cannot be opened, they go to /dev/null: nothing waits on a dead tty."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()  # a line that failed with EIO is still buffered: into /dev/null
    try:
        with open_nofollow(path, "ab") as log:  # refuses a link, a FIFO, a directory
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
    except (OSError, UserError):  # UserError: a link or a FIFO planted there
        pass


def stdin_from_devnull() -> None:
    """fd 0 reads /dev/null: nothing left in this process reads the terminal's keys."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def print_out(line: str) -> None:
    """One line on stdout, flushed; a stdout nobody reads any more is dropped, not an error."""
    try:
        print(line, flush=True)
    except (OSError, ValueError):
        stdout_gone()


def say(message: str) -> None:
    """One line on stderr; nothing when the terminal is gone (hung up: EIO)."""
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


class TerminalOutput:
    """A text stream over the terminal that discards writes once the terminal is gone
    (a write or flush failed with OSError: EIO after a hangup, EPIPE, EBADF)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except (OSError, ValueError):  # ValueError: the stream was closed
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.gone = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)  # fileno, isatty, encoding, ...


@contextlib.contextmanager
def open_log(path: Path) -> Iterator[IO[str]]:
    """A run's log, appended to line by line. A disk that fills does not end the run here:
    the console sink writing to it goes quiet on its own, and the close ignores the error."""
    log = open_nofollow(path, "a", encoding="utf-8", buffering=1)  # closed below
    try:
        yield log
    finally:
        with contextlib.suppress(OSError, ValueError):
            log.close()


def write_quietly(stream: IO[str], text: str) -> None:
    """`stream.write(text)`, or nothing when the disk (or terminal) refuses it."""
    with contextlib.suppress(OSError, ValueError):
        stream.write(text)


TERMINAL_DRIVERS = ("textual.drivers.linux", "textual.drivers.windows")  # need a terminal


def can_draw_ui(*, stdout: bool = True) -> str | None:
    """The one check every command makes before it starts a Textual UI: None when the UI
    can draw here, else why not, in a few words.

    It can when TEXTUAL_DRIVER names a driver that needs no terminal (the web driver of
    `textual serve` speaks over pipes); else stdin and stderr (where Textual's driver reads
    keys and draws) must be terminals, and stdout too unless `stdout` is False (a command
    whose output is the UI's own, like `watch`); and TERM must name a terminal that takes
    escape codes (not unset, dumb or unknown: they would show as text)."""
    driver = os.environ.get("TEXTUAL_DRIVER")  # what textual.constants.DRIVER reads
    if driver and not driver.startswith(TERMINAL_DRIVERS):
        return None
    streams = {"stdin": sys.stdin, "stdout": sys.stdout, "stderr": sys.stderr}
    if not stdout:
        del streams["stdout"]
    missing = [name for name, f in streams.items() if not _isatty(f)]
    if missing:
        are = "is" if len(missing) == 1 else "are"
        return f"no terminal ({' and '.join(missing)} {are} not a TTY)"
    term = os.environ.get("TERM", "")
    if term in ("", "dumb", "unknown"):
        return f"TERM={term or '(unset)'} cannot draw the dashboard"
    return None


def _isatty(stream: Any) -> bool:
    try:
        return stream is not None and bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False
