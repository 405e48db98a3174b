"""Banner: one visible notice under the status bar (a failure, or what a stop waits for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.widgets import Static

from tuitrain.ui.view import Failure
from tuitrain.ui.widgets.panel import esc


def failure_text(fail: Failure, run_dir: str | None) -> str:
    """The failure as the banner shows it: message, hint, where the traceback is, what next."""
    lines = [f"[b]run failed:[/b] {esc(fail.message)}"]
    if fail.hint:
        lines.append(f"[b]hint:[/b] {esc(fail.hint)}")
    where = f" in {esc(run_dir)}/train.log" if run_dir else " in the run's train.log"
    tail = f"the traceback is{where} and in the event log · " if fail.traceback else ""
    lines.append(f"{tail}[b]p[/b] pick a preset · [b]q[/b] quit")
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
