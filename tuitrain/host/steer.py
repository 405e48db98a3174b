"""The host's end of the control channel (`tuitrain.rundir.control`): a thread that reads the
requests a viewer (`tuitrain watch`) drops in the run dir and hands them to the run's
`Control`, as the dashboard's keys do; the engine acts on them at its next step boundary.
Each request is answered by an event record (kind "control": `command`, `request`, and
`accepted`) written to the run's sinks, so the viewer sees what became of it.

Rank 0 (or the only process) listens; a run dir where the channel cannot be made safely
(a link or a directory of another user under that name) runs without one, saying so once.
The channel goes when the run ends, however it ends (completed, failed, stopped, a refusal
at its start): `RunHost` closes the listener in a `finally`, and an exit hook closes it when
the process leaves with the engine thread still running (a dashboard that did not wait for
it). Only a killed process leaves it behind, and its owner mark then names a dead process:
stale, never steerable, and removed by the next writer of the run dir.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from tuitrain.core.control import Control
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.metrics.records import Record, event_record
from tuitrain.rundir.control import ChannelError, Inbox, Request

POLL_S = 0.2  # how often the channel is read; the engine acts at its next step boundary
STOP_REASON = "stopped from tuitrain watch"

Write = Callable[[Record], None]


def apply_request(control: Control, request: Request) -> str:
    """Hand one accepted request to `control`; the sentence that acknowledges it."""
    who = f" (pid {request.fields['pid']})" if "pid" in request.fields else ""
    command = request.command
    if command == "stop":
        control.request_stop(STOP_REASON, exit_code=EXIT_STOPPED)
        return f"stop requested from tuitrain watch{who}: stopping at a step boundary"
    if command == "pause":
        control.pause()
        return f"pause requested from tuitrain watch{who}"
    if command == "resume":
        control.resume()
        return f"resume requested from tuitrain watch{who}"
    if command == "checkpoint":
        control.request_checkpoint()
        return f"checkpoint requested from tuitrain watch{who}: saved after this step"
    steps = int(request.fields["steps"])
    control.request_profile(steps)
    return f"profile of {steps} steps requested from tuitrain watch{who}"


def answer(control: Control, request: Request) -> Record:
    """The event record that answers `request` (after applying it, when accepted)."""
    if request.refused:
        return event_record(
            f"refused a control request: {request.refused}",
            level="warning",
            kind="control",
            command=request.command or None,
            request=request.id or None,
            accepted=False,
        )
    if control.stop_requested and request.command != "stop":
        return event_record(
            f"{request.command} not done: the run is stopping",
            kind="control",
            command=request.command,
            request=request.id,
            accepted=False,
        )
    message = apply_request(control, request)
    return event_record(
        message,
        kind="control",
        command=request.command,
        request=request.id,
        accepted=True,
        paused=control.paused,
    )


class Listener:
    """Reads the channel every POLL_S in a daemon thread until `close()`."""

    def __init__(self, run_dir: Path, control: Control, write: Write) -> None:
        self.control = control
        self.write = write
        self._done = threading.Event()
        self._closing = threading.Lock()  # the exit hook and the run's finally may race
        self.inbox: Inbox | None = None
        try:
            self.inbox = Inbox(run_dir)
        except (ChannelError, OSError) as exc:
            write(
                event_record(
                    f"no control channel for tuitrain watch: {exc}",
                    level="warning",
                    kind="control",
                    accepted=False,
                )
            )
            return
        self.thread = threading.Thread(target=self._loop, name="tuitrain-control", daemon=True)
        self.thread.start()
        atexit.register(self.close)  # the process leaves before the run's finally does

    def _loop(self) -> None:
        while not self._done.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        """Read and answer what waits now (the thread calls this; tests may too)."""
        if self.inbox is None:
            return
        with self._closing:
            requests = self.inbox.take()
        for request in requests:
            # a sink that failed: the run says so itself
            with contextlib.suppress(Exception):
                self.write(answer(self.control, request))

    def close(self) -> None:
        """Stop listening and remove the channel (the run is over: nothing listens)."""
        self._done.set()
        if self.inbox is None:
            return
        atexit.unregister(self.close)
        thread = getattr(self, "thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(2 * POLL_S + 1)
        with self._closing:
            self.inbox.close()
