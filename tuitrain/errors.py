"""Errors users can cause, each carrying its exit code (tracebacks are for our bugs)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARITY_FAIL = 3
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
