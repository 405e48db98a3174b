"""How a tuitrain app stops: on a stop signal, or when what it draws on goes away.

`StoppingApp` is the base of the dashboard (`SessionApp`) and of the compare viewer. A stop
signal ends it the way `q` does, so the terminal is given back (SIGTERM's default action
killed a viewer on the alternate screen with echo off), with the signal's exit code: 143
SIGTERM, 130 SIGINT (a `kill`: in the app, ctrl+c is a key), 129 SIGHUP. A viewer process
still there `force_exit_s` after it was asked to stop is ended (`leave_after`; `tuitrain
watch` sets it): nothing may keep it alive. The dashboard stops its run first, and waits
for it (`SessionApp`).

Its driver is Textual's, except for two that survive what they draw on going away: in a
terminal `HangupSafeDriver` (an SSH connection that drops), and under `textual serve`
`ServedDriver`. textual serve runs one process per browser with Textual's web driver,
speaking packets over its stdin and stdout. When the server is gone (stopped, killed), the
input ends and the output has no reader: Textual's driver only stopped reading, and its
next write raised BrokenPipeError inside the app, which then neither drew nor exited; the
viewer outlived its server for ever. `ServedDriver` drops output nobody reads and treats
either end as a hangup: the app stops as on SIGHUP, at once, and exits 129.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import signal
import threading
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.drivers.web_driver import WebDriver
from textual.notifications import SeverityLevel

from tuitrain.core.errors import EXIT_SIGHUP
from tuitrain.core.text import strip_controls
from tuitrain.host.signals import SIGNAL_NAMES, leave_after, on_stop_signals
from tuitrain.ui.terminal import HangupSafeDriver

OUTPUT_CHECK_S = 0.5  # how often ServedDriver looks for a reader on its output, at most


class StoppingApp(App[int]):
    """An app that stops on SIGTERM, SIGINT and SIGHUP with their exit codes (`app.run()`
    returns the code), drawing through drivers that survive their terminal or server."""

    force_exit_s: float | None = None  # set where the process ends with the app: watch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.signal_exit_code: int | None = None
        self._remove_signal_handlers: Callable[[], None] | None = None
        self._leaving = False  # the process is set to end force_exit_s from then

    def get_driver_class(self) -> type[Driver]:
        """Textual's choice, except that a terminal's or a web server's survives its end."""
        driver = super().get_driver_class()
        return {LinuxDriver: HangupSafeDriver, WebDriver: ServedDriver}.get(driver, driver)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Textual's toast, with text shown literally by default: a message carries paths,
        presets' names and users' exceptions, and a bracket in one must not end the app."""
        super().notify(
            strip_controls(str(message)),
            title=strip_controls(str(title)),
            severity=severity,
            timeout=timeout,
            markup=markup,
        )

    def action_help_quit(self) -> None:
        """ctrl+c does what q does (Textual's own toast only says how to quit)."""
        self.call_later(self.run_action, "quit")

    def stop_signals(self) -> tuple[int, ...]:
        return tuple(SIGNAL_NAMES)

    def install_signal_handlers(self) -> None:
        """Take the stop signals through the app's event loop (once; on_mount does it).

        A viewer process (`force_exit_s` set) takes them in plain handlers instead, which
        run even while the loop is stuck (a write to an output nobody reads blocks, and a
        signal only interrupts it for it to be retried): they set the process to end, then
        ask the app through the loop."""
        if self._remove_signal_handlers is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self.force_exit_s is None:
            handle = on_stop_signals(self.on_stop_signal, self.stop_signals(), loop)
        else:

            def on_signal(name: str, code: int) -> None:
                self.leave_within(code)
                with contextlib.suppress(RuntimeError):  # the loop is closed: nearly gone
                    loop.call_soon_threadsafe(self.on_stop_signal, name, code)

            handle = on_stop_signals(on_signal, self.stop_signals())
        self._remove_signal_handlers = handle

    def remove_signal_handlers(self) -> None:
        remove, self._remove_signal_handlers = self._remove_signal_handlers, None
        if remove is not None:
            remove()

    def on_mount(self) -> None:
        self.install_signal_handlers()

    def on_unmount(self) -> None:
        self.remove_signal_handlers()

    def on_stop_signal(self, name: str, code: int) -> None:
        """Leave as on q, with the signal's exit code (the process within `force_exit_s`)."""
        self.signal_exit_code = code
        self.exit(code)
        self.leave_within(code)

    def leave_within(self, code: int) -> None:
        """End the process with `code` in `force_exit_s` if it is still there (once)."""
        if self.force_exit_s is not None and not self._leaving:
            self._leaving = True
            leave_after(self.force_exit_s, code)


class ServedDriver(WebDriver):
    """Textual's web driver (textual serve) for a process that must not outlive its server:
    the end of its input, or an output without a reader, stops the app as a hangup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # Driver keeps the app's event loop in _loop
        self.output_gone = False  # nothing reads the output: it is dropped
        self.server_gone = False  # the app was told (once)
        write = self._write

        def write_while_read(data: bytes) -> None:
            if self.output_gone:
                return
            try:
                write(data)
            except OSError:  # EPIPE: nothing reads the output any more
                self.output_gone = True
                self.lost_server()

        self._write = write_while_read  # type: ignore[assignment]  # all output goes here

    def start_application_mode(self) -> None:
        super().start_application_mode()
        # Textual's driver makes SIGINT and SIGTERM quit with exit code 0: the app's own
        # handlers instead (StoppingApp puts them in place as it mounts).
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.remove_signal_handler(signum)
        if hasattr(select, "poll"):  # not on Windows
            watch = threading.Thread(target=self._watch_output, name="tuitrain-served-output")
            watch.daemon = True
            watch.start()

    def run_input_thread(self) -> None:
        super().run_input_thread()
        if not self.exit_event.is_set():  # the input ended, not the app
            self.lost_server()

    def _watch_output(self) -> None:
        """Until the app stops: the output's reader gone (POLLERR on a pipe, POLLHUP on a
        socket) is a lost server, seen even while the app has nothing new to draw."""
        poller = select.poll()
        poller.register(self.fileno, 0)  # errors and hangups are reported unasked
        while not self.exit_event.is_set():
            if poller.poll(OUTPUT_CHECK_S * 1000):
                self.output_gone = True
                self.lost_server()
                return

    def lost_server(self) -> None:
        """Stop the app as on SIGHUP, unless it is stopping already (from any thread)."""
        if self.server_gone or self.exit_event.is_set():
            return
        self.server_gone = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the app is over
            self._loop.call_soon_threadsafe(self._hang_up)

    def _hang_up(self) -> None:
        stop = getattr(self._app, "on_stop_signal", None)
        if callable(stop):
            stop("SIGHUP", EXIT_SIGHUP)
        else:
            self._app.exit(EXIT_SIGHUP, return_code=EXIT_SIGHUP)
