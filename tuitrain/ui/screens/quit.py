"""The question `q` asks over a live run: stop and save, detach, or cancel.

A long run is not ended by one stray key. `q` (or ctrl+c, ctrl+q) opens this dialog; `q`
again (or `s`, enter) confirms stop-and-save, so `q q` still stops. `d` detaches: the
dashboard closes and training goes on in this process with line logs, where `tuitrain watch
DIR` brings the dashboard back. Escape (or `c`, `n`) cancels. The same dialog, without
detach, confirms a stop sent from a viewer (`tuitrain watch` over a hosted run).
"""

from __future__ import annotations

from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tuitrain.ui.widgets.panel import esc

QuitChoice = Literal["stop", "detach"]


class QuitScreen(ModalScreen["QuitChoice | None"]):
    """Dismissed with "stop", "detach" (when offered) or None (cancel)."""

    BINDINGS = [
        Binding("q,s,enter", "choose('stop')", "Stop and save"),
        Binding("d", "choose('detach')", "Detach"),
        Binding("escape,c,n", "choose('')", "Cancel"),
        Binding("ctrl+c,ctrl+q", "choose('stop')", "Stop and save", show=False, priority=True),
    ]

    def __init__(self, run_dir: str | None, *, detach: bool = True, what: str = "") -> None:
        super().__init__()
        self.run_dir = run_dir or "DIR"
        self.detach = detach
        self.what = what or "This run is still training."

    def compose(self) -> ComposeResult:
        where = esc(self.run_dir)
        rows = [
            ("q / s / enter", "[b]stop and save[/b]: at the next step boundary, with a "
             f"checkpoint; it resumes with [b]tuitrain --resume auto --run-dir {where}[/b]"),
        ]  # fmt: skip
        if self.detach:
            rows.append(("d", "[b]detach[/b]: the dashboard closes, training goes on here with "
                         f"line logs; [b]tuitrain watch {where}[/b] shows it again"))  # fmt: skip
        rows.append(("escape / c", "[b]cancel[/b]: keep going"))
        width = max(len(keys) for keys, _ in rows)
        lines = [esc(self.what), ""]
        lines += [f"[b $accent]{esc(keys):<{width}}[/]  {text}" for keys, text in rows]
        with Vertical(id="quit-dialog", classes="dialog") as dialog:
            dialog.border_title = "Stop the run?"
            dialog.border_subtitle = "q stops · escape cancels"
            yield Static("\n".join(lines), id="quit-text")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.detach or not (action == "choose" and parameters == ("detach",))

    def action_choose(self, choice: str) -> None:
        if choice == "stop":
            self.dismiss("stop")
        elif choice == "detach" and self.detach:
            self.dismiss("detach")
        else:
            self.dismiss(None)
