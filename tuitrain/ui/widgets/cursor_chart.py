"""CursorChart: a chart whose values can be read off at a step (the metrics screen's charts).

Focused (tab, a click, or an arrow key on the metrics screen), the chart takes a cursor:
`left`/`right` move it to the previous or next point drawn, `home`/`end` to the first or
last, `escape` leaves it. The points are the series as drawn, decimated to the chart's width
(`Series.decimate`): the cursor reads the point at or before its step, which is what the line
shows there. The step and value go in the chart's bottom border; a vertical line marks the
step on the chart.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from textual.binding import Binding

from tuitrain.ui.widgets.chart import MetricChart, format_tick


class CursorChart(MetricChart):
    """A focusable MetricChart with a step cursor over its drawn points."""

    can_focus = True
    BINDINGS = [
        Binding("right", "move(1)", "Step", key_display="←/→", tooltip="Cursor to the next point"),
        Binding("left", "move(-1)", "Step back", show=False),
        Binding("home", "jump(0)", "Ends", key_display="home/end", tooltip="First or last point"),
        Binding("end", "jump(-1)", "Last point", show=False),
        Binding("escape", "leave", "No cursor", key_display="esc", tooltip="Hide the cursor"),
    ]

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.xs: Sequence[float] = ()  # the points as drawn (decimated), in the metric's units
        self.ys: Sequence[float] = ()
        self.value_text: Callable[[float], str] = format_tick
        self.note = ""  # the bottom border without a cursor (e.g. "y in MiB")

    def set_points(
        self, xs: Sequence[float], ys: Sequence[float], value_text: Callable[[float], str]
    ) -> None:
        """The points just drawn and how a value reads; the cursor stays at its step."""
        self.xs, self.ys, self.value_text = xs, ys, value_text
        self.show_cursor()

    def point_at(self, step: float) -> tuple[float, float] | None:
        """The drawn point at or before `step`; None before the first."""
        i = bisect.bisect_right(self.xs, step) - 1
        return (self.xs[i], self.ys[i]) if i >= 0 else None

    def show_cursor(self) -> None:
        """The step and value at the cursor in the bottom border, or the note alone."""
        point = self.point_at(self.cursor) if self.cursor is not None else None
        if point is None:
            self.border_subtitle = self.note
            return
        step, value = point
        text = f"step {step:.0f}: {self.value_text(value)}"
        if len(text) + 4 > self.size.width:  # a narrow chart: the value before the word
            text = f"{step:.0f}: {self.value_text(value)}"
        self.border_subtitle = f"{text} · {self.note}" if self.note else text

    def place(self, step: float | None) -> None:
        self.cursor = step
        self.show_cursor()
        self.redraw()

    def action_move(self, by: int) -> None:
        if not self.xs:
            return
        if self.cursor is None:  # the first key: the cursor at the end it moves away from
            self.place(self.xs[0] if by > 0 else self.xs[-1])
            return
        if by > 0:
            i = bisect.bisect_right(self.xs, self.cursor)
            self.place(self.xs[min(i, len(self.xs) - 1)])
        else:
            i = bisect.bisect_left(self.xs, self.cursor) - 1
            self.place(self.xs[max(i, 0)])

    def action_jump(self, index: int) -> None:
        if self.xs:
            self.place(self.xs[index])

    def action_leave(self) -> None:
        """No cursor, and the focus back to the screen (escape again closes it)."""
        self.place(None)
        self.screen.set_focus(None)
