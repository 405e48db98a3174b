"""Errors users can cause, each carrying its exit code (tracebacks are for our bugs)."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path
from typing import NoReturn

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARITY_FAIL = 3
EXIT_STOPPED = 4  # stopped from a tuitrain UI: q in the dashboard, or a viewer's stop
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
EXIT_SIGHUP = 129


class UserError(Exception):
    """Bad input: a preset, a value, a path, missing data. One sentence, exit code 2."""

    exit_code = EXIT_USAGE


class TrainingError(Exception):
    """The training itself failed (NaN loss, out of memory...). Exit code 1."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str = "", step: int | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.step = step


def usable_path(path: str | Path, what: str) -> Path:
    """`path` (~ expanded) once the system can look it up; a name it refuses outright (too
    long: ENAMETOOLONG, a loop of links, no permission to look) is one sentence naming
    `what`. A path that does not exist is fine here: the caller says what that means."""
    found = Path(path).expanduser()
    try:
        found.stat()
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        shown = str(found) if len(str(found)) <= 80 else str(found)[:77] + "..."
        raise UserError(
            f"{what} {shown} cannot be looked up ({reason}); pass another path."
        ) from None
    return found


class OneLineParser(argparse.ArgumentParser):
    """argparse whose own errors (an unknown flag, a bad int) are one line and exit 2, like
    every other bad input; the usage is in --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
