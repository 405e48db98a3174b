"""Profile screen: torch.profiler's top table for the steps profiled from the UI."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer, Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ProfileScreen(ModalScreen[None]):
    """The table as the profiler printed it, scrollable both ways; escape closes."""

    BINDINGS = [Binding("escape,q", "close", "Close")]

    def __init__(self, message: str, table: str) -> None:
        super().__init__()
        self.message = message
        self.table = table

    def compose(self) -> ComposeResult:
        with Vertical(id="profile-dialog", classes="dialog") as dialog:
            dialog.border_title = "Profile · top operators"
            dialog.border_subtitle = "arrows scroll · escape closes"
            yield Static(self.message, markup=False, classes="dialog-note")
            with ScrollableContainer(id="profile-scroll"):
                yield Static(self.table, markup=False, id="profile-table")

    def on_mount(self) -> None:
        self.query_one("#profile-scroll").focus()

    def action_close(self) -> None:
        self.dismiss(None)
