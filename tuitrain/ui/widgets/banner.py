"""Banner: one visible notice under the status bar (a failure, or what a stop waits for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.widgets import Static

from tuitrain.rundir.layout import TRAIN_LOG
from tuitrain.ui.view import Failure
from tuitrain.ui.widgets.panel import esc


def failure_text(
    fail: Failure, run_dir: str | None, *, can_pick: bool = True, log: str | None = TRAIN_LOG
) -> str:
    """The failure as the banner shows it: message, hint, where the traceback is, and the
    keys that act now (`p` only where a preset can be started: the hosted dashboard)."""
    lines = [f"[b]run failed:[/b] {esc(fail.message)}"]
    if fail.hint:
        lines.append(f"[b]hint:[/b] {esc(fail.hint)}")
    if log is None:  # a script run directly: its output went to its own terminal
        tail = "the traceback is in the event log · " if fail.traceback else ""
    else:
        where = f" in {esc(run_dir)}/{log}" if run_dir else f" in the run's {log}"
        tail = f"the traceback is{where} and in the event log · " if fail.traceback else ""
    keys = "[b]p[/b] pick a preset · [b]q[/b] quit" if can_pick else "[b]q[/b] closes the view"
    lines.append(f"{tail}{keys}")
    return "\n".join(lines)


def alert_text(alert: Mapping[str, Any]) -> str:
    """The newest alert as the banner shows it: its name, step, message and action."""
    name = str(alert.get("alert") or "alert")
    message = str(alert.get("message") or "").removeprefix(f"alert {name}: ")
    step = alert.get("step")
    at = f" at step {step}" if isinstance(step, int) else ""
    action = alert.get("action")
    acted = f" · action: {esc(str(action))}" if action and action != "warn" else ""
    return f"[b]⚠ alert {esc(name)}{at}:[/b] {esc(message)}{acted}"


class Banner(Static):
    """Hidden while there is nothing to say; `-error` or `-notice` style otherwise."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown: tuple[str, str] | None = None
        self.display = False

    def show(self, text: str, kind: str = "notice") -> None:
        if self._shown == (text, kind):
            return
        self._shown = (text, kind)
        self.update(text)
        self.set_class(kind == "error", "-error")
        self.set_class(kind != "error", "-notice")
        self.display = True

    def clear(self) -> None:
        if self._shown is not None:
            self._shown = None
            self.display = False
