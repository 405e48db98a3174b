"""Keep native stderr (torch's C++ warnings, the profiler's logs) off the dashboard.

Textual draws on `sys.__stderr__`. Libraries below Python write to file descriptor 2
directly, which would scribble over the screen. While the app runs, fd 2 points at a log
file and Textual draws through a duplicate of the terminal's descriptor.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


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
    terminal_fd = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    terminal = os.fdopen(terminal_fd, "w", encoding=original.encoding, errors=original.errors)
    sys.__stderr__ = terminal
    os.dup2(log_fd, 2)
    try:
        yield
    finally:
        terminal.flush()
        os.dup2(terminal_fd, 2)
        sys.__stderr__ = original
        terminal.close()
        os.close(log_fd)
