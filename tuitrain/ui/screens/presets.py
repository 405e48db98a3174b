"""Preset picker: every preset with its description; choosing one returns its name."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tuitrain.core.text import strip_controls


class PresetScreen(ModalScreen[str | None]):
    """Enter starts the highlighted preset (the current run stops first); escape cancels."""

    BINDINGS = [Binding("escape,q", "cancel", "Cancel")]

    def __init__(
        self,
        presets: Sequence[tuple[str, str]],
        current: str | None,
        overrides: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.presets = list(presets)
        self.current = current
        self.overrides = list(overrides)

    def compose(self) -> ComposeResult:
        options = []
        for name, description in self.presets:
            mark = "  (current)" if name == self.current else ""
            prompt = Content.assemble(  # literal text, without control characters
                (strip_controls(name, one_line=True), "bold"),
                (mark, "italic"),
                "\n",
                (strip_controls(description, one_line=True) or "—", "dim"),
            )
            options.append(Option(prompt, id=name))
        with Vertical(id="preset-dialog", classes="dialog") as dialog:
            dialog.border_title = "Switch preset"
            dialog.border_subtitle = "enter starts it · escape cancels"
            kept = (
                f"\nThese overrides apply to it too: {' '.join(self.overrides)}"
                if self.overrides
                else ""
            )
            yield Static(
                "The current run stops at a step boundary and finishes writing its files; "
                f"then the chosen preset starts in a new run dir.{kept}",
                classes="dialog-note",
                markup=False,
            )
            yield OptionList(*options, id="preset-list")

    def on_mount(self) -> None:
        names = [name for name, _ in self.presets]
        option_list = self.query_one(OptionList)
        if self.current in names:
            option_list.highlighted = names.index(self.current)
        option_list.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
