"""Parity check screen (placeholder): the fp32-vs-mixed parity check is not available yet.

The parity issue replaces this screen; the app's `c` key pushes `ParityScreen`.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ParityScreen(ModalScreen[None]):
    """Says the parity check is not available yet; escape closes."""

    BINDINGS = [Binding("escape,q", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="parity-dialog", classes="dialog") as dialog:
            dialog.border_title = "Parity check"
            dialog.border_subtitle = "escape closes"
            yield Static(
                "The parity check (fp32 against mixed precision on the same batches) is not "
                "available yet: it arrives with the parity feature.\n\n"
                "Press escape to go back to the run.",
                classes="dialog-note",
            )

    def action_close(self) -> None:
        self.dismiss(None)
