"""The dashboard as a viewer (`tuitrain watch`, the views `tuitrain runs` opens): its badge,
the keys it offers, and the steering of a live hosted run through the control channel.

A viewer reads a run's records; it owns no engine. It offers the keys that act on what it
shows: the view's own (log y, metrics, help, quit), and, while the run it watches is hosted
by a live tuitrain process of this user that listens on its channel
(`tuitrain.core.channel.steerable`), pause/resume, checkpoint, profile and stop (asked
first). `q` closes a viewer at once and leaves the run alone.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Static

from tuitrain.core.channel import ChannelError, send_request, steerable
from tuitrain.metrics.store import Snapshot

STEER_CHECK_S = 1.0  # how often a viewer looks whether its run can be steered
# actions that need the hosted engine in this process (never a viewer's)
ENGINE_ACTIONS = frozenset({"pick_preset", "parity", "memory_snapshot"})
# actions a viewer offers while its run listens on the control channel
STEER_ACTIONS = frozenset({"toggle_pause", "checkpoint", "profile", "stop_run"})


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


def paused_by_records(snap: Snapshot) -> bool:
    """The run is paused as far as its records tell: its newest pause/resume event is a
    pause, and no end record came."""
    if snap.end is not None:
        return False
    for event in reversed(snap.events):
        kind = event.get("kind")
        if kind in ("pause", "resume"):
            return kind == "pause"
    return False


__all__ = [
    "ENGINE_ACTIONS",
    "STEER_ACTIONS",
    "ChannelError",
    "Steering",
    "ViewingBadge",
    "paused_by_records",
]
