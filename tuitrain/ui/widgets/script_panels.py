"""A script's Config and Summary panels: what the script was started with (its config, and
wandb's init keywords beside it), and the last value of every key it logged (the end
record's summary once it has one): the first two things a W&B user looks for."""

from __future__ import annotations

from tuitrain.ui.panels import script_config_items, summary_items
from tuitrain.ui.view import Frame
from tuitrain.ui.widgets.metrics_panel import cut
from tuitrain.ui.widgets.panel import Panel, esc

KEY_CELLS = 18


def key_rows(items: list[tuple[str, str]], width: int) -> str:
    """`key  value` rows, keys in a column of their own (cut at KEY_CELLS)."""
    if not items:
        return ""
    keys = min(KEY_CELLS, max(len(k) for k, _ in items))
    value_cells = max(4, width - keys - 1)
    return "\n".join(
        f"[$foreground-muted]{esc(cut(k, keys).ljust(keys))}[/] {esc(cut(v, value_cells))}"
        for k, v in items
    )


class ConfigPanel(Panel):
    """The script's config (`wandb.init(config=...)`, `wandb.config.update`), flattened."""

    TITLE = "Config"
    HAS_CHART = False

    def summary(self, frame: Frame) -> str:
        header = frame.snap.header
        if header is None:
            return "[$foreground-muted]waiting for the script's first record[/]"
        items = script_config_items(header, frame.snap.events)  # a key once, its last value
        text = key_rows(items, self.summary_text.content_size.width or 40)
        return text or "[$foreground-muted]no config given (wandb.init(config=...))[/]"


class SummaryPanel(Panel):
    """The last value of each key: the end record's summary, or the series so far."""

    TITLE = "Summary"
    HAS_CHART = False

    def summary(self, frame: Frame) -> str:
        items = summary_items(frame.snap)
        text = key_rows(items, self.summary_text.content_size.width or 40)
        return text or "[$foreground-muted]waiting for the first log point[/]"
