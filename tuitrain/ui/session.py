"""SessionApp: the hosted-run lifecycle under the dashboard (start, switch, quit, signals).

One run at a time, owned by an `RunHost`. Stopping is always asynchronous: the engine is
asked to stop at a step boundary, the UI keeps running and says what it waits for, and the
`RunEnded` message (posted from the engine thread) triggers what comes next: exit, or the
next preset. `TuitrainApp` adds the layout, the polling and the keys on top.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

from textual.message import Message

from tuitrain.core.config import Config, load_preset
from tuitrain.core.errors import EXIT_STOPPED, UserError
from tuitrain.host.run import RunHost
from tuitrain.metrics.records import event_record
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.layout import sibling_run_dir
from tuitrain.ui.stopping import StoppingApp
from tuitrain.ui.view import host_memory_bytes

NEEDS_ENGINE = "this key steers a live run; the app is only watching records"
PEERS_GONE = (
    "the other ranks exited when this DDP run ended, so preset {name} cannot start here; "
    "start a new job: tuitrain --nproc N --preset {name}"
)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # with a run; SIGINT is a key (ctrl+c) in the app


class RunEnded(Message):
    """Posted from the engine thread when a hosted run has ended (thread-safe)."""

    def __init__(self, host: RunHost) -> None:
        super().__init__()
        self.host = host


class SessionApp(StoppingApp):
    """Owns the current `RunHost` and the quit/switch state machine. Without a host it only
    watches its store (`tuitrain watch`): a viewer, stopped as `StoppingApp` stops."""

    def __init__(
        self,
        store: MetricStore | None = None,
        host: RunHost | None = None,
        overrides: Sequence[str] = (),
    ) -> None:
        super().__init__()
        hosted = host.store if host is not None else None
        self.store: MetricStore = hosted if hosted is not None else (store or MetricStore())
        self.host = host
        self.overrides = list(overrides)
        self.host_memory = host_memory_bytes() if host is not None else None
        self.pending: str | None = None  # "quit" or "switch" while the engine stops
        self.detached = False  # d in the quit question: the run goes on after the app
        self.pending_cfg: Config | None = None
        self.ui_failure: BaseException | None = None  # an exception that ended the app

    def _handle_exception(self, error: Exception) -> None:
        """An exception in the app ends it (Textual's rule); remember it first, so the run
        under it is not stopped as if the user quit: run_app carries it on headless."""
        if self.ui_failure is None:
            self.ui_failure = error
        super()._handle_exception(error)

    # -- hooks for the dashboard ---------------------------------------------------------
    def reset_view(self) -> None:
        """Forget what the panels drew (a new run starts)."""

    def refresh_view(self) -> None:
        """Redraw now (after a state change the user caused)."""

    # -- the hosted run ------------------------------------------------------------------
    def launch(self, host: RunHost) -> None:
        """Start `host` and make it the current run."""

        def on_end(ended: RunHost) -> None:
            self.post_message(RunEnded(ended))

        host.on_end = on_end
        self.host = host
        self.host_memory = host_memory_bytes()
        host.start()

    def on_run_ended(self, message: RunEnded) -> None:
        host = message.host
        if host is not self.host:
            return
        host.join(timeout=2.0)  # it is past its last record; this returns at once
        if self.pending == "quit":
            self.exit(self.exit_code())
        elif self.pending == "switch" and self.pending_cfg is not None:
            if host.can_follow():
                self.start_preset(self.pending_cfg, previous=host)
            else:  # the run ended on its own just before the switch reached the other ranks
                name, self.pending, self.pending_cfg = self.pending_cfg.name, None, None
                self.notify(PEERS_GONE.format(name=name), severity="warning", timeout=10)
        elif host.result is not None:
            result = host.result
            text = f"run {result.status}: {result.reason}"
            if result.status == "failed":
                self.notify(text, severity="error", timeout=6)
            else:
                self.notify(text, severity="information", timeout=6)

    def start_preset(self, cfg: Config, previous: RunHost | None) -> None:
        """Reset the store and panels and start `cfg` in a new run dir, logging the switch."""
        self.pending, self.pending_cfg = None, None
        notes: list[Mapping[str, Any]] = []
        run_dir = None
        if previous is not None:
            old = previous.cfg.name
            step = previous.result.step if previous.result else "?"
            where = f", its files are in {previous.run_dir}" if previous.run_dir else ""
            notes.append(
                event_record(
                    f"switched preset {old} → {cfg.name} (the {old} run stopped at step {step}"
                    f"{where})",
                    kind="preset_switch",
                    previous=old,
                    preset=cfg.name,
                )
            )
            run_dir = sibling_run_dir(previous.run_dir, cfg.name)
        self.store.reset()
        self.reset_view()
        dist = previous.dist if previous is not None else None
        host = RunHost(cfg, self.store, run_dir=run_dir, notes=notes, dist=dist, steerable=True)
        self.launch(host)
        self.notify(f"started preset {cfg.name}", timeout=3)
        self.refresh_view()

    def switch_overrides(self) -> list[str]:
        """The session's overrides for another preset: all but the run dir (a new one)."""
        return [o for o in self.overrides if not o.replace(" ", "").startswith("run.run_dir=")]

    def switch_to(self, name: str | None) -> None:
        """Validate the chosen preset, stop the current run, start the new one when it ended."""
        if not name or self.pending == "quit":
            return
        try:
            cfg = load_preset(name, self.switch_overrides())
        except UserError as exc:
            self.notify(str(exc), title="cannot switch preset", severity="error", timeout=8)
            return
        host = self.host
        if host is not None and host.distributed and not host.set_successor(cfg):
            self.notify(PEERS_GONE.format(name=name), severity="warning", timeout=10)
            return
        if host is not None and host.alive:
            self.pending, self.pending_cfg = "switch", cfg
            host.request_stop(f"switching to preset {name}")
            self.refresh_view()
        else:
            self.start_preset(cfg, previous=host)

    def request_quit(self) -> None:
        """First call: stop at a step boundary (exit code EXIT_STOPPED) and exit when the
        engine ended; then: exit now. The dashboard asks first (`TuitrainApp.action_quit`)."""
        host = self.host
        if self.pending == "quit" or host is None or not host.alive:
            # a switch whose old run has ended: its next preset is not started after all
            self.pending, self.pending_cfg = "quit", None
            self.exit(self.exit_code())
            return
        self.pending = "quit"
        host.control.request_stop("quit from the UI", exit_code=EXIT_STOPPED)
        self.refresh_view()

    def detach(self) -> None:
        """Close the app and leave the run training (run_app carries it on headless)."""
        host = self.host
        if host is None or not host.alive or self.pending == "quit":
            self.request_quit()
            return
        self.detached = True
        self.exit(0)

    def exit_code(self) -> int:
        """0 when the last run completed (or none ran); the run's own code when it failed or
        was stopped (EXIT_STOPPED from q, a signal's code); a signal's code for the app."""
        if self.signal_exit_code is not None:
            return self.signal_exit_code
        host = self.host
        if host is None:
            return 0
        result = host.result
        if result is not None:
            return int(result.exit_code or 0) if result.status in ("failed", "stopped") else 0
        if host.control.stop_requested and host.control.exit_code is not None:
            return host.control.exit_code  # left before the engine ended (q q)
        return 0

    def live_host(self) -> RunHost | None:
        """The running host, or None after telling the user why the key does nothing."""
        host = self.host
        if host is None:
            self.notify(NEEDS_ENGINE, severity="warning")
            return None
        if not host.alive:
            self.notify("no run is active: press p to start a preset", severity="warning")
            return None
        return host

    # -- signals -------------------------------------------------------------------------
    def stop_signals(self) -> tuple[int, ...]:
        """With a run: SIGTERM (a scheduler) or SIGHUP (the SSH connection dropped)."""
        return STOP_SIGNALS if self.host is not None else super().stop_signals()

    def on_stop_signal(self, name: str, code: int) -> None:
        """Stop the run cleanly, as q, and exit with the signal's code once it ended."""
        if self.host is None:
            super().on_stop_signal(name, code)
            return
        self.signal_exit_code = code
        self.host.control.request_stop(f"stopped by {name}", exit_code=code)
        self.pending = "quit"
        if not self.host.alive:
            self.exit(code)
        else:
            self.refresh_view()

    def on_unmount(self) -> None:
        """However the app ends, the engine is asked to stop (run_app then joins it)."""
        self.remove_signal_handlers()
        if self.host is not None and self.ui_failure is None and not self.detached:
            self.host.request_stop("quit from the UI")
