"""Output pane: a script's stdout and stderr as text (never markup), newest at the bottom.

`tuitrain run` writes lines into it as the script prints them; `watch` over a run dir that
`tuitrain run` made (it has an output.log) shows the file's tail and follows what is
appended (`OutputTail`)."""

from __future__ import annotations

import os
from pathlib import Path

from textual.geometry import Size
from textual.reactive import Reactive
from textual.widgets import RichLog

from tuitrain.core.text import strip_controls

MAX_OUTPUT_LINES = 2000
TAIL_BYTES = 64 * 1024  # watch: the end of output.log read at first, then what is appended
READ_BYTES = 256 * 1024  # at most this much a poll (a script printing fast: later polls)


class OutputLog(RichLog):
    """The script's own output, as text (never markup), newest at the bottom."""

    DEFAULT_CSS = """
    OutputLog {
        height: 1fr;
        min-height: 5;
        border: round $secondary-muted;
        border-title-color: $text-secondary;
        background: $background;
        overflow-x: hidden;
        overflow-y: scroll;
    }
    """
    # RichLog grows its virtual size with every line, and a virtual size is a layout reactive
    # in Textual: each new line laid the whole dashboard out again (9 ms a line on a 2-core
    # VM, 5% of a core for a script printing 5 lines a second, taken from its training
    # threads). The pane's own size never follows its content (height 1fr, scrollbars fixed
    # above), so a new line needs its scrollbar updated and a repaint, not a layout.
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False, repaint=True)

    def watch_virtual_size(self, size: Size) -> None:
        self._scroll_update(size)

    def __init__(self) -> None:
        # min_width=1: RichLog wraps at max(width, min_width=78); with no horizontal
        # scrollbar a narrower pane would hide the ends of wrapped rows
        super().__init__(id="output", wrap=True, markup=False, highlight=False,
                         max_lines=MAX_OUTPUT_LINES, min_width=1)  # fmt: skip
        self.border_title = "Output"


class OutputTail:
    """Lines appended to a file since the last `read()`: the last TAIL_BYTES at first, a
    partial last line kept until its newline comes; a file that shrank is read again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset: int | None = None
        self.partial = b""

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if self.offset is None or size < self.offset:  # first look, or truncated
                    self.offset, self.partial = max(0, size - TAIL_BYTES), b""
                    first = self.offset > 0
                else:
                    first = False
                f.seek(self.offset)
                data = f.read(READ_BYTES)
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if first and lines:
            lines = lines[1:]  # the tail starts mid-line
        return [strip_controls(line.decode("utf-8", "replace")) for line in lines]
