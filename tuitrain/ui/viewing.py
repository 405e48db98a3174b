"""The dashboard as a viewer (`tuitrain watch`, the views `tuitrain runs` opens): its badge,
the keys it offers, and the steering of a live hosted run through the control channel.

A viewer reads a run's records; it owns no engine. It offers the keys that act on what it
shows: the view's own (log y, metrics, help, quit), and, while the run it watches is hosted
by a live tuitrain process of this user that listens on its channel
(`tuitrain.rundir.control.steerable`), pause/resume, checkpoint, profile and stop (asked
first). `q` closes a viewer at once and leaves the run alone.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

from textual.binding import Binding
from textual.widgets import Static

from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore, Snapshot
from tuitrain.rundir.control import ChannelError, send_request, steerable
from tuitrain.ui.screens.metrics import MetricsScreen
from tuitrain.ui.screens.quit import QuitScreen
from tuitrain.ui.session import NEEDS_ENGINE, SessionApp
from tuitrain.ui.view import paused_by_records

STEER_CHECK_S = 1.0  # how often a viewer looks whether its run can be steered
# actions that need the hosted engine in this process (never a viewer's)
ENGINE_ACTIONS = frozenset({"pick_preset", "parity", "memory_snapshot"})
# actions a viewer offers while its run listens on the control channel
STEER_ACTIONS = frozenset({"toggle_pause", "resume", "checkpoint", "profile", "stop_run"})
VIEWER_QUIT_TIP = "Close this viewer; the run is left alone"


class ViewingBadge(Static):
    """` VIEWING ` at the top right: this dashboard watches records, it does not host."""

    SCOPED_CSS = False  # the screen's layers too: the badge draws above docked widgets
    DEFAULT_CSS = """
    Screen {
        layers: default viewing;
    }
    ViewingBadge {
        layer: viewing;
        position: absolute;
        width: auto;
        height: 1;
        padding: 0 1;
        text-style: bold;
        color: $text;
        background: $secondary;
    }
    ViewingBadge.-steer {
        background: $accent;
    }
    """

    def set_text(self, steer: bool) -> None:
        self.set_class(steer, "-steer")
        self.update("VIEWING · steers run" if steer else "VIEWING")

    def place(self, width: int, row: int = 0, margin: int = 0) -> None:
        """At the right end of `row`, `margin` cells from the edge (`position: absolute`
        takes an offset from the screen's top left)."""
        shown = len(str(self.visual)) + 2 if self.visual is not None else 9
        self.styles.offset = (max(0, width - shown - margin), row)


class Steering:
    """A viewer's remote for one run dir: whether it listens, and sending it requests."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ready = False
        self._checked = -float("inf")
        self.sent: dict[str, str] = {}  # request id -> command, for the acknowledgements

    def check(self, snap: Snapshot, force: bool = False) -> bool:
        """Whether the run can be steered now (looked at once a second); True on a change."""
        now = time.monotonic()
        if not force and now - self._checked < STEER_CHECK_S:
            return False
        self._checked = now
        ready = snap.end is None and steerable(self.run_dir)
        changed, self.ready = ready != self.ready, ready
        return changed

    def send(self, command: str, **fields: object) -> str:
        """Send `command`; the request's id, or ChannelError (one sentence)."""
        request_id = send_request(self.run_dir, command, **fields)
        self.sent[request_id] = command
        return request_id


class ViewingApp(SessionApp):
    """`SessionApp` plus what a viewer needs: built without a host it watches records (its
    `watched_path`), shows the badge, offers only the keys that act and steers a live hosted
    run through its channel. `TuitrainApp` (the dashboard) builds on it."""

    def __init__(
        self,
        store: MetricStore | None = None,
        host: RunHost | None = None,
        overrides: Sequence[str] = (),
    ) -> None:
        super().__init__(store=store, host=host, overrides=overrides)
        self.watched_path: Path | None = None  # watch mode: the followed metrics file
        self.steering: Steering | None = None  # watch mode: a live hosted run's control channel
        self.back_to: str | None = None  # opened from `tuitrain runs`: escape goes back

    @property
    def viewing(self) -> bool:
        """True for a viewer: the app watches records and hosts nothing (`ScriptApp` hosts a
        script: it may say True once the script has ended)."""
        return self.host is None and not getattr(self, "hosts_script", False)

    def start_viewing(self) -> None:
        """The VIEWING badge; the control channel of the watched run's dir, when it has one."""
        if self.watched_path is not None and self.steering is None:
            self.steering = Steering(self.watched_path.parent)
        self.badge = ViewingBadge("VIEWING", id="viewing")
        self.badge.display = self.viewing
        self.screen.mount(self.badge)
        self.check_steering(force=True)

    def check_steering(self, force: bool = False) -> None:
        """Offer the steering keys while the watched run listens, and only then."""
        if not hasattr(self, "badge"):
            return
        if self.badge.display != self.viewing:
            self.badge.display = self.viewing
            self.refresh_bindings()
        steering = self.steering
        if steering is None or not steering.check(self.store.snapshot(), force):
            if force:
                self.badge.set_text(steering is not None and steering.ready)
                self.badge.place(self.size.width)
            return
        self.badge.set_text(steering.ready)
        self.badge.place(self.size.width)
        self.refresh_bindings()

    def run_paused(self) -> bool:
        """Paused or pausing (the engine's control here; the records for a watched run):
        what space undoes."""
        host = self.host
        if host is None:
            return paused_by_records(self.store.snapshot())
        return bool(host.control.paused)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A viewer offers (footer, help, palette) and obeys only the keys that act."""
        if action == "back_to_runs":
            return self.back_to is not None
        if action in ("metrics", "filter_metrics") and isinstance(self.screen, MetricsScreen):
            return False  # shown already (another would stack on it)
        if action in ("toggle_pause", "resume") and self.run_paused() != (action == "resume"):
            return False  # space's other label: the one that says what it does now
        if self.host is not None:
            return action != "stop_run"  # q asks first on the dashboard
        if action in ENGINE_ACTIONS:  # no engine in this process: a viewer, a script's run
            return False
        if action in STEER_ACTIONS:
            return self.steering is not None and self.steering.ready
        return True

    def offered(self) -> list[Binding]:
        """The bindings that act now, in BINDINGS' order (help and the palette list them)."""
        offered = []
        for binding in Binding.make_bindings(self.BINDINGS):
            if self.check_action(binding.action.split("(")[0], ()) is False:
                continue
            if binding.action == "quit" and self.viewing:
                binding = dataclasses.replace(binding, tooltip=VIEWER_QUIT_TIP)
            offered.append(binding)
        return offered

    def steer(self, command: str, done: str, **fields: object) -> bool:
        """Send `command` to the watched run; say so (or why not)."""
        if self.steering is None or not self.steering.ready:
            self.notify(NEEDS_ENGINE, severity="warning")
            return False
        try:
            self.steering.send(command, **fields)
        except ChannelError as exc:
            self.notify(str(exc), title="cannot steer the run", severity="error", timeout=8)
            return False
        self.notify(done, timeout=3)
        return True

    def action_back_to_runs(self) -> None:
        """Opened from `tuitrain runs`: escape closes the view, the table comes back."""
        if self.back_to is not None:
            self.exit(0)

    def action_stop_run(self) -> None:
        """A viewer: stop the watched run (asks first); its host saves and ends it."""
        if self.steering is None or not self.steering.ready:
            self.notify(NEEDS_ENGINE, severity="warning")
            return
        run_dir = str(self.steering.run_dir)

        def answered(choice: str | None) -> None:
            if choice == "stop":
                self.steer("stop", "stop sent: the run saves and ends at a step boundary")

        what = "Stop the run this viewer watches? Its own process saves and ends it."
        self.push_screen(QuitScreen(run_dir, detach=False, what=what), answered)


__all__ = [
    "ENGINE_ACTIONS",
    "VIEWER_QUIT_TIP",
    "ViewingApp",
    "STEER_ACTIONS",
    "ChannelError",
    "Steering",
    "ViewingBadge",
    "paused_by_records",
]
