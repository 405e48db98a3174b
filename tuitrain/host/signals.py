"""Stop signals, handled once for every way a run is hosted (no torch, no Textual here).

SIGINT (130), SIGTERM (143) and SIGHUP (129) stop a run at the next step boundary with its
state saved; a second one leaves at once, but never in the middle of a checkpoint or of the
last record (`Control.critical`). SIGHUP is left alone when it is ignored (`nohup`): the run
goes on after the SSH session. The dashboard takes the same signals through its event loop
(`on_stop_signals(..., loop=...)`): there a signal quits the app the way `q` does, and a
viewer that is still there seconds later is ended (`leave_after`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tuitrain.core.errors import EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM

if TYPE_CHECKING:
    import asyncio  # 30 ms to import: only the app's event loop needs it, and has it

    from tuitrain.core.control import Control

SIGNAL_NAMES: dict[int, tuple[str, int]] = {
    signal.SIGINT: ("SIGINT", EXIT_SIGINT),
    signal.SIGTERM: ("SIGTERM", EXIT_SIGTERM),
    signal.SIGHUP: ("SIGHUP", EXIT_SIGHUP),
}
EARLY_SIGNALS: list[int] = []  # stop signals that came before the run's handlers were in place
_BEFORE_DEFER: dict[int, object] = {}  # the handlers defer_signals replaced
LAUNCHER_ENV = "TUITRAIN_LAUNCHER_PID"  # set by `tuitrain --nproc` for its ranks
ORPHAN_POLL_S = 1.0


def _ignored_hangup(signum: int) -> bool:
    return signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN


def defer_signals() -> None:
    """Until the run installs its own handlers: note a stop signal instead of acting on it.

    A KeyboardInterrupt raised while torch is importing can be swallowed by torch's C++
    (NumPy's initialisation, pybind11's exec), leaving numpy half-imported ("module 'numpy'
    has no attribute 'multiply'" at the first step) or making CPython re-raise SIGINT at exit.
    The run reads EARLY_SIGNALS once its imports are done.
    """

    def note(signum: int, _frame: object) -> None:
        EARLY_SIGNALS.append(signum)

    for signum in SIGNAL_NAMES:
        if not _ignored_hangup(signum):
            previous = signal.signal(signum, note)
            _BEFORE_DEFER.setdefault(signum, previous)


def undefer_signals() -> None:
    """The handlers `defer_signals` replaced, back (the dashboard takes the signals its own
    way; a noted signal stays in EARLY_SIGNALS for the caller to act on)."""
    for signum, previous in list(_BEFORE_DEFER.items()):
        with contextlib.suppress(TypeError, ValueError):
            signal.signal(signum, previous)  # type: ignore[arg-type]
        del _BEFORE_DEFER[signum]


def early_signal(pop: bool = False) -> tuple[str, int] | None:
    """(name, exit code) of the first stop signal noted by `defer_signals`, or None."""
    if not EARLY_SIGNALS:
        return None
    signum = EARLY_SIGNALS.pop(0) if pop else EARLY_SIGNALS[0]
    return SIGNAL_NAMES[signum]


def on_stop_signals(
    callback: Callable[[str, int], None],
    signums: Iterable[int] = tuple(SIGNAL_NAMES),
    loop: asyncio.AbstractEventLoop | None = None,
) -> Callable[[], None]:
    """Call `callback(name, exit_code)` on each stop signal in `signums` (an ignored SIGHUP
    stays ignored); through `loop` when given (the callback then runs in the event loop),
    else as a plain handler. Returns the function that puts the previous handlers back. Off
    the main thread nothing can be installed and nothing is."""
    wanted = [s for s in signums if not _ignored_hangup(s)]
    if loop is not None:
        installed = []
        for signum in wanted:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, callback, *SIGNAL_NAMES[signum])
                installed.append(signum)

        def remove_loop_handlers() -> None:
            for signum in installed:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(signum)

        return remove_loop_handlers
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, _frame: object) -> None:
        callback(*SIGNAL_NAMES[signum])

    previous = {signum: signal.signal(signum, handler) for signum in wanted}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


def stop_run_on_signals(
    control: Control,
    *,
    prog: str = "tuitrain",
    verb: str = "stopped",
    signums: Iterable[int] = tuple(SIGNAL_NAMES),
) -> Callable[[], None]:
    """A stop signal stops the run at the next step boundary (reason "<verb> by SIG…", the
    signal's exit code); a second one leaves at once (SystemExit with that code), or once the
    critical section it fell into is done; after the run's end it is ignored."""

    def on_signal(name: str, code: int) -> None:
        if control.stop_requested:  # a second Ctrl-C: leave now (or once a save is written)
            if control.state in ("completed", "stopped", "failed"):
                return  # the run is over and the process on its way out: nothing to cut
            if control.in_critical:
                control.leave_code = code
                return
            raise SystemExit(code)
        control.request_stop(f"{verb} by {name}", exit_code=code)
        # SIGHUP: the terminal is gone and this print fails with EIO; raised here, in the
        # middle of a step, it would fail the run instead of stopping it.
        doing = "cancelling" if verb == "cancelled" else "stopping after the current step"
        with contextlib.suppress(OSError, ValueError):
            print(f"{prog}: {name} received, {doing}", file=sys.stderr, flush=True)

    return on_stop_signals(on_signal, signums)


def stop_if_orphaned(control: Control, poll_s: float = ORPHAN_POLL_S) -> Callable[[], None]:
    """A rank started by `tuitrain --nproc` stops (and saves) when its launcher is gone (killed
    with SIGKILL, so it could not pass a signal on) instead of training on as an orphan.
    Returns the function that ends the watch; a no-op when not started by --nproc."""
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if not launcher.isdigit() or os.getppid() != int(launcher):
        return lambda: None
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            if os.getppid() != int(launcher):
                control.request_stop(
                    f"stopped: the launcher (tuitrain --nproc, pid {launcher}) is gone",
                    exit_code=EXIT_SIGTERM,
                )
                return

    threading.Thread(target=watch, name="tuitrain-orphan-watch", daemon=True).start()
    return done.set


def leave_after(seconds: float, code: int) -> Callable[[], None]:
    """The last resort of a process asked to stop: `os._exit(code)` in `seconds` unless the
    returned function is called first. A daemon timer: it never keeps the process alive, and
    it fires even when the main thread is stuck (a write that blocks, a thread never joined).
    """
    timer = threading.Timer(seconds, os._exit, (code,))
    timer.name = "tuitrain-leave-after"
    timer.daemon = True
    timer.start()
    return timer.cancel
