"""The Output pane takes a line without laying the dashboard out again (issue #40: each line
relaid the whole screen, 5% of a core taken from a watched script's training threads)."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from tuitrain.ui.widgets.output import OutputLog


class Pane(App[None]):
    def compose(self) -> ComposeResult:
        for i in range(6):
            yield Static(f"panel {i}")
        yield OutputLog()


def test_new_lines_repaint_the_pane_and_follow_the_newest_without_a_layout(
    monkeypatch,  # noqa: ANN001
) -> None:
    layouts = 0
    original = Screen._refresh_layout

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        nonlocal layouts
        layouts += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)

    async def go() -> None:
        app = Pane()
        async with app.run_test(size=(70, 30)) as pilot:  # narrower than RichLog's 78
            log = app.query_one(OutputLog)
            await pilot.pause()
            before = layouts
            for i in range(40):
                log.write(f"iter {i}: loss 2.5")
                await pilot.pause()
            assert layouts - before <= 2, f"{layouts - before} layouts for 40 lines"
            # the newest line is at the bottom and the scrollbar knows the 40 lines
            assert log.virtual_size.height == 40
            assert log.scroll_y == log.max_scroll_y > 0
            assert log.vertical_scrollbar.window_virtual_size == 40
            shown = [log.render_line(y).text for y in range(log.scrollable_content_region.height)]
            assert "iter 39: loss 2.5" in shown[-1]
            # a line wider than the pane wraps inside it (no horizontal scrollbar to reach past)
            width = log.scrollable_content_region.width
            log.write("y" * (width + 5) + "Z")
            await pilot.pause()
            assert log.virtual_size.width <= width
            shown = [log.render_line(y).text for y in range(log.scrollable_content_region.height)]
            assert shown[-1].rstrip().endswith("Z")

    asyncio.run(go())
