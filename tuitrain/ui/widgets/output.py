"""Output pane: a script's stdout and stderr as text (never markup), newest at the bottom.

`tuitrain run` writes lines into it as the script prints them; `watch` over a run dir that
`tuitrain run` made (it has an output log) shows the file's tail and follows what is
appended (`rundir.read.OutputTail`)."""

from __future__ import annotations

from textual.geometry import Size
from textual.reactive import Reactive
from textual.widgets import RichLog

MAX_OUTPUT_LINES = 2000


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
