"""Helpers for pilot tests: wait for a condition with a deadline, read a widget's text."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Static

ENGINE_THREAD_PREFIX = "tuitrain-engine"


def engine_threads() -> list[threading.Thread]:
    """Engine threads alive now (RunHost names them tuitrain-engine[<preset>])."""
    return [t for t in threading.enumerate() if t.name.startswith(ENGINE_THREAD_PREFIX)]


async def wait_for(
    pilot: Pilot, condition: Callable[[], object], timeout: float = 30.0, what: str = ""
) -> None:
    """Poll `condition` while the app runs, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or condition}")
        await pilot.pause(0.1)


def text_of(widget: Static) -> str:
    """The plain text a Static shows."""
    visual = widget.visual
    return str(getattr(visual, "plain", visual))


def record_notifications(app: App) -> list[str]:
    """Keep every message the app notifies (toasts expire; this list does not)."""
    seen: list[str] = []
    notify = app.notify

    def recording(message: str, *args: object, **kwargs: object) -> None:
        seen.append(str(message))
        notify(message, *args, **kwargs)  # type: ignore[arg-type]

    app.notify = recording  # type: ignore[method-assign]
    return seen
