"""Item 4, the UI's own cost: CPU time of the app per new record, A/B of one UI change.

    python bench/ui_refresh.py --records 150 --repeats 6                  # --compare chart
    python bench/ui_refresh.py --records 150 --repeats 6 --compare summary
    python bench/ui_refresh.py --records 150 --repeats 6 --compare both

The real `TuitrainApp` (no engine) runs headless under Textual's `run_test` at 120×40. Each
iteration feeds one record of the deterministic test run (tests/ui/fake_records.py, fp16 on
CUDA: every panel has something to show) through the UI's own sink, calls `poll_text()` as
the 5 Hz timer does, and waits until Textual has processed the refresh (layout, compositor,
the headless driver's write). Measured: the process CPU time per record (`time.process_time`,
so waiting on other processes of a busy machine is not counted), in blocks interleaved A B,
B A, ...

`--compare chart` (default): the charts' direct ANSI-to-strips rendering
(`MetricChart.render_line`) against the generic one (`Text.from_ansi`, then Textual's Content
path, as `PlotextPlot.render` does). Here `poll_plots()` is also called after 2 of every 5
records, the app's text:plot ratio (5 Hz : 2 Hz), so a record stands for one 5 Hz tick of a
live run where every tick has new data.

`--compare both`: both of this round's changes (the strips above, and the summary's height
taken as its line count when no line is wider than the panel, without a wrapping pass)
against neither; plots as in `chart`.

`--compare summary`: summaries with a layout pass only on a height change
(`panel.update_summary`) against the former `Static.update(text)` (a layout pass per changed
summary); `poll_plots` is left to the app's own 2 Hz timer in both.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from _common import REPO, emit, machine, spread

sys.path.insert(0, str(REPO))  # tests.ui.fake_records

from textual.geometry import Size  # noqa: E402
from textual.widget import Widget  # noqa: E402
from textual.widgets import Static  # noqa: E402

from tests.ui.fake_records import header, records  # noqa: E402
from tuitrain.metrics.sinks import TimelineStoreSink  # noqa: E402
from tuitrain.metrics.store import MetricStore  # noqa: E402
from tuitrain.ui import app as app_module  # noqa: E402
from tuitrain.ui.widgets import panel as panel_module  # noqa: E402
from tuitrain.ui.widgets.chart import MetricChart  # noqa: E402

NOW = panel_module.update_summary
CHART_NOW = MetricChart.render_line


def layout_every_update(summary: Static, text: str) -> None:
    summary.update(text)  # layout=True: Textual's default


def height_by_wrapping(summary: Static, text: str) -> None:
    """`panel.update_summary` before the line-count shortcut: Textual's wrapped height."""
    width = summary.content_size.width
    no_size = Size(0, 0)
    before = summary.get_content_height(no_size, no_size, width) if width else None
    summary.update(text, layout=False)
    if before is None or summary.get_content_height(no_size, no_size, width) != before:
        summary.refresh(layout=True)


def generic_render_line(chart: MetricChart, y: int) -> Any:
    return Widget.render_line(chart, y)  # Widget's cache over PlotextPlot.render()


async def block(mode: str, feed: list[dict[str, Any]]) -> float:
    """CPU seconds per record for one app fed `feed` after its header."""
    panel_module.update_summary = {
        "layout_every_update": layout_every_update,
        "neither": height_by_wrapping,
    }.get(mode, NOW)
    generic = mode in ("chart_generic", "neither")
    MetricChart.render_line = generic_render_line if generic else CHART_NOW  # type: ignore[method-assign]
    plots = mode.startswith("chart_") or mode in ("both", "neither")
    store = MetricStore()
    sink = TimelineStoreSink(store)
    sink.write(header("fp16", "cuda"))
    app = app_module.TuitrainApp(store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_all()
        await pilot.pause()
        t0 = time.process_time()
        for i, rec in enumerate(feed):
            sink.write(rec)
            app.poll_text()
            if plots and (2 * i) % 5 < 2:
                app.poll_plots()
            await pilot.pause()
        cpu = time.process_time() - t0
    panel_module.update_summary = NOW
    MetricChart.render_line = CHART_NOW  # type: ignore[method-assign]
    return cpu / len(feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--compare", choices=["chart", "summary", "both"], default="chart")
    args = parser.parse_args()
    feed = [r for r in records("fp16", "cuda", steps=2 * args.records) if r["type"] != "header"]
    modes = {
        "chart": ["chart_strips", "chart_generic"],
        "both": ["both", "neither"],
        "summary": ["layout_when_height_changes", "layout_every_update"],
    }[args.compare]
    asyncio.run(block(modes[0], feed[:20]))  # warm-up
    results: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.repeats):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            results[mode].append(asyncio.run(block(mode, feed)))
    now, before = results[modes[0]], results[modes[1]]
    emit(
        {
            "item": f"4 UI CPU per record, A/B: {modes[0]} vs {modes[1]}",
            "machine": machine(),
            "command": " ".join(["python bench/ui_refresh.py", *sys.argv[1:]]),
            "records_per_block": len(feed),
            **{f"{m}_cpu_ms_per_record": spread([1e3 * x for x in results[m]], 2) for m in modes},
            "ratio_now_over_before": spread([a / b for a, b in zip(now, before, strict=True)]),
        }
    )


if __name__ == "__main__":
    main()
