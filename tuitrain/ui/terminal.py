"""Survive a terminal that goes away (the SSH connection dropped).

When the terminal hangs up, writing to it fails with EIO. Textual's writer thread dies of
that, its bounded queue fills and the app's next write blocks for ever: the process hangs
after the run has ended. `HangupSafeDriver` draws through `TerminalOutput`, which drops
output once the terminal is gone, so the app still stops the run and exits (129 on SIGHUP).

Textual's Linux driver also takes SIGTSTP and SIGCONT (Ctrl-Z, fg) when it is built and
never gives them back. After a detach (`d`) the run goes on without the app, and a hangup
comes with a SIGCONT: Textual's handler then restarted application mode, raised "no running
event loop" in the main thread, the interpreter shut down under the engine thread and the
process died of SIGABRT. `HangupSafeDriver.close` puts the previous handlers back.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import IO, Any

from textual.drivers.linux_driver import LinuxDriver

from tuitrain.host.stdio import TerminalOutput

__all__ = ["HangupSafeDriver", "TerminalOutput", "clear_after_dashboard"]

# out of the alternate screen (nothing where Textual left it already), then the whole
# screen erased and the cursor at its top left
LEAVE_AND_CLEAR = "\x1b[?1049l\x1b[H\x1b[2J"

JOB_CONTROL_SIGNALS = (signal.SIGTSTP, signal.SIGCONT)  # the ones LinuxDriver takes


class HangupSafeDriver(LinuxDriver):
    """Textual's Linux driver, drawing through `TerminalOutput`: a hung-up terminal cannot
    kill its writer thread and so block the app (and the process) for ever. Closed (the app
    has ended), it hands SIGTSTP and SIGCONT back to the handlers it found."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.job_control_before = {s: signal.getsignal(s) for s in JOB_CONTROL_SIGNALS}
        super().__init__(*args, **kwargs)
        file = getattr(self, "_file", None)  # Textual 8.2's LinuxDriver draws on self._file
        if file is not None and not isinstance(file, TerminalOutput):
            self._file = TerminalOutput(file)  # type: ignore[assignment]

    def close(self) -> None:
        super().close()
        for signum, handler in self.job_control_before.items():
            with contextlib.suppress(TypeError, ValueError):  # ValueError: not the main thread
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def clear_after_dashboard(stream: IO[str] | None = None) -> bool:
    """A terminal the dashboard drew on, cleared for the line logs that follow it (a
    detach): a frame drawn while the app left the alternate screen would stay above them.
    Nothing for a stream that is no terminal, or is gone. True when cleared."""
    stream = stream if stream is not None else sys.stdout
    try:
        if not stream.isatty():
            return False
        stream.write(LEAVE_AND_CLEAR)
        stream.flush()
    except (OSError, ValueError, AttributeError):  # hung up, closed, no isatty
        return False
    return True
