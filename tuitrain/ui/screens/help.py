"""Help screen: every key of the app, generated from its BINDINGS (never hand-duplicated)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tuitrain.ui.widgets.panel import esc as escape

PANEL_NOTES = {  # what each panel shows, keyed by its id (tuitrain.ui.panels.panel_ids)
    "loss": "Loss: smoothed train loss per step, validation loss per eval, accuracy",
    "throughput": "Throughput: {unit}/s and step time",
    "memory": "Memory: this process's allocator (alloc/reserved/peak) and the GPU's memory in "
    "use by all processes, with its utilisation; host RSS on CPU; then the host's CPU use, "
    "disk read/write and network rx/tx a second",
    "scaler": "GradScaler: fp16 loss scale on a log2 axis",
    "metrics": "Metrics: the run's own metrics, then lr and grad norm, each with a sparkline",
    "datawait": "Data wait: share of step time waiting for the loader, with a verdict",
    "overview": "Overview: model, data, optimizer, versions, run dir",
    "config": "Config: what the script was started with (its config, init keywords)",
    "summary": "Summary: the last value of every key the script logged",
}
ALWAYS = (
    "Events: compile, epochs, warnings, errors",
    "Metrics (g): a chart for every series the run holds, / filters them by name, ←/→ read "
    "a step's value",
)


def panel_notes(panel_ids: Iterable[str], unit: str = "samples") -> str:
    """The help's footnote: what each panel on the screen shows, in grid order, then the
    event log and the metrics screen; a panel not shown is not described. `unit`: what the
    throughput is counted in (tuitrain.ui.panels.throughput_unit)."""
    notes = {panel: note.replace("{unit}", unit) for panel, note in PANEL_NOTES.items()}
    shown = [notes[panel] for panel in panel_ids if panel in notes]
    return " · ".join([*shown, *ALWAYS])


PANELS = panel_notes(("loss", "throughput", "memory", "scaler", "datawait", "overview"))

CLOSES = "escape closes"
MORE = "↓ more: ↑ ↓ scroll"


def binding_rows(
    app_bindings: Iterable[BindingType], key_display: Callable[[Binding], str]
) -> list[tuple[str, str, str]]:
    """(keys, description, tooltip) per action; keys of one action joined: `q / ^q`."""
    rows: dict[str, tuple[list[str], Binding]] = {}
    for binding in Binding.make_bindings(app_bindings):
        keys, _first = rows.setdefault(binding.action, ([], binding))
        shown = key_display(binding)
        if shown not in keys:
            keys.append(shown)
    return [(" / ".join(keys), first.description, first.tooltip) for keys, first in rows.values()]


def binding_commands(app: App[Any], app_bindings: Iterable[BindingType]) -> list[SystemCommand]:
    """Command palette entries, `Log y (l)`, one per action of `app_bindings` (the palette's
    own key left out): what Textual 8's palette does not list by itself."""
    commands = []
    seen: set[str] = set()
    for binding in Binding.make_bindings(app_bindings):
        action = binding.action
        if action in seen or action == "command_palette":
            continue
        seen.add(action)
        commands.append(
            SystemCommand(
                f"{binding.description} ({app.get_key_display(binding)})",
                binding.tooltip or binding.description,
                lambda action=action: app.call_later(app.run_action, action),
            )
        )
    return commands


class HelpScreen(ModalScreen[None]):
    """Lists every key with what it does, then a footnote (what the panels or columns mean);
    escape, q or ? closes it. The dashboard and `watch --compare` both use it."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "Close help")]

    def __init__(
        self, bindings: Iterable[BindingType], title: str = "tuitrain · keys", notes: str = PANELS
    ) -> None:
        super().__init__()
        self.app_bindings = list(bindings)
        self.title_text = title
        self.notes = notes

    def compose(self) -> ComposeResult:
        rows = binding_rows(self.app_bindings, self.app.get_key_display)
        key_width = max((len(keys) for keys, _, _ in rows), default=0)
        name_width = max((len(name) for _, name, _ in rows), default=0)
        lines = [
            f"[b $accent]{escape(keys):<{key_width}}[/]  [b]{escape(name):<{name_width}}[/]  "
            f"{escape(tip)}"
            for keys, name, tip in rows
        ]
        with Vertical(id="help-dialog", classes="dialog") as dialog:
            dialog.border_title = self.title_text
            dialog.border_subtitle = CLOSES
            with VerticalScroll():
                yield Static("\n".join(lines), id="help-keys")
                yield Static(f"[$foreground-muted]{escape(self.notes)}[/]", id="help-notes")

    def on_mount(self) -> None:
        self.call_after_refresh(self.say_if_it_scrolls)

    def on_resize(self) -> None:
        self.call_after_refresh(self.say_if_it_scrolls)

    def say_if_it_scrolls(self) -> None:
        """A list taller than the dialog scrolls (its bar shows); the border says so too."""
        scroll = self.query_one(VerticalScroll)
        more = scroll.max_scroll_y > 0
        self.query_one("#help-dialog").border_subtitle = f"{MORE} · {CLOSES}" if more else CLOSES

    def action_close(self) -> None:
        self.dismiss(None)
