"""Text from files, paths, presets and users' code, made safe to put on a terminal.

A string read from a record or a preset is data: it may hold terminal control sequences
(ESC, BEL, a C1 CSI) that would move the cursor, retitle the window or clear the screen if
printed as they are. `strip_controls` removes every C0 and C1 control character except the
newline and the tab (and ESC with them, which leaves a harmless `[31m` visible). Markup is
the other danger, inside Textual: widgets show such text as `Text`/escaped content, never as
markup (see tuitrain.ui.widgets.panel.esc).
"""

from __future__ import annotations

import re

CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CONTROLS_AND_NEWLINES = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def strip_controls(text: str, *, one_line: bool = False) -> str:
    """`text` without terminal control characters; with `one_line`, newlines and tabs become
    spaces too (a name or a description printed on one line)."""
    if one_line:
        return CONTROLS_AND_NEWLINES.sub(lambda m: " " if m.group() in "\n\t\r" else "", text)
    return CONTROLS.sub("", text)


def cut_at_word(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: whole when it fits, else cut at the last space
    that leaves room for an ellipsis (mid-word only when one word is longer than `limit`)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > 0:
        head = head[:space]
    return head.rstrip(" ,;:·-") + "…"
