"""Survive a terminal that goes away (the SSH connection dropped).

When the terminal hangs up, writing to it fails with EIO. Textual's writer thread dies of
that, its bounded queue fills and the app's next write blocks for ever: the process hangs
after the run has ended. `HangupSafeDriver` draws through `TerminalOutput`, which drops
output once the terminal is gone, so the app still stops the run and exits (129 on SIGHUP).
"""

from __future__ import annotations

from typing import Any

from textual.drivers.linux_driver import LinuxDriver

from tuitrain.host.stdio import TerminalOutput

__all__ = ["HangupSafeDriver", "TerminalOutput"]


class HangupSafeDriver(LinuxDriver):
    """Textual's Linux driver, drawing through `TerminalOutput`: a hung-up terminal cannot
    kill its writer thread and so block the app (and the process) for ever."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        file = getattr(self, "_file", None)  # Textual 8.2's LinuxDriver draws on self._file
        if file is not None and not isinstance(file, TerminalOutput):
            self._file = TerminalOutput(file)  # type: ignore[assignment]
