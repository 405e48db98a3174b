"""Text is data, never markup: strings from files, paths, presets and users' code show
literally in every widget that renders record text, brackets, backslashes, control
characters and very long strings included; text where a number goes is shown, not crashed on;
and a dashboard that fails anyway leaves its run going headless (ui-traceback.txt, an end
record that says so, exit 1)."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textual.geometry import Region
from textual.markup import to_content

from tests.ui.fake_records import records
from tests.ui.pilot_tools import text_of
from tuitrain.core.text import CONTROLS, strip_controls
from tuitrain.metrics.sinks import ConsoleSink, TimelineStoreSink
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.compare import Source, summarize, table_text
from tuitrain.ui.view import Frame, failure
from tuitrain.ui.widgets.banner import alert_text, failure_text
from tuitrain.ui.widgets.panel import esc

MARK = "[b]lit[/b]"  # must be shown as these nine characters wherever it is put
HOSTILE = [
    "[/b]",
    "[bold",
    "[$primary]x[/]",
    "[@click=app.quit]q[/]",
    "\\",
    "a\\[b]",
    "]",
    "\x1b[31m\x1b]0;title\x07",
    "\x9b2J",
    "\r\x00\x7f",
    "$x {0} %s",
    "x" * 3000,
    "😀" * 20,
]
hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.sampled_from(list("[]\\/$@=bx \n\t\x1b\x07\x9b")), max_size=40),
    st.text(max_size=60),
)
# what a foreign file can put where a number goes
odd_number = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["2", "abc", "[b]", "1e400", "nan", ""]),
    hostile_text,
)


def shown(value: str) -> str:
    """What a widget shows for `value` (control characters are stripped)."""
    return strip_controls(value)


@given(hostile_text)
@settings(max_examples=300, deadline=None)
def test_esc_shows_any_text_literally_inside_markup(text: str) -> None:
    content = to_content(f"[b]a[/b]{esc(text)}[b]z[/b]\n[$primary]{esc(text)}[/]")
    line = shown(text) + ("\u200b" if shown(text).endswith("\\") else "")
    assert content.plain == f"a{line}z\n{line}"


@given(st.text())
def test_strip_controls_leaves_no_control_character(text: str) -> None:
    out = strip_controls(text)
    assert not CONTROLS.search(out)
    assert "\n" not in strip_controls(text, one_line=True)
    printable = "".join(c for c in text if not CONTROLS.match(c))
    assert out == printable


def test_headless_lines_carry_no_escape_sequence() -> None:
    out = io.StringIO()
    ConsoleSink(out, out).write(
        {"type": "event", "level": "warning", "message": "a\x1b]0;x\x07b\x1b[2J [b]c[/b]"}
    )
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "[b]c[/b]" in out.getvalue()


def poisoned_records(text: str, number: Any) -> list[dict[str, Any]]:
    """fake_records' run with `text` in every text field, header value and config value,
    `number` in the header's numbers and a few config numbers, and MARK next to each."""

    def poison(value: Any) -> Any:
        if isinstance(value, str):
            return f"{value}{MARK}{text}"
        if isinstance(value, dict):
            return {k: poison(v) for k, v in value.items()}
        return value

    out = []
    for rec in records("fp16", "cuda", 40):
        if rec["type"] != "train":
            rec = {"type": rec["type"], **{k: poison(v) for k, v in rec.items() if k != "type"}}
        out.append(rec)
    header = out[0]
    for key in ("total_steps", "world_size", "params", "global_batch", "steps_per_epoch"):
        header[key] = number
    header["config"]["optim"]["grad_accum"] = number
    header["config"]["optim"]["lr"] = number
    header["config"]["train"]["epochs"] = number
    header["config"]["train"]["label_smoothing"] = number
    out.append({"type": "eval", "step": 40, "epoch": number, "val_loss": number, "val_acc": number})
    alert = {"type": "event", "level": "warning", "kind": "alert", "alert": f"{MARK}{text}"}
    out.append({**alert, "message": f"{MARK}{text}", "action": text, "step": 40})
    fail = {"type": "event", "level": "error", "kind": "failed", "message": f"{MARK}{text}"}
    out.append({**fail, "hint": text, "traceback": f"{MARK}{text}"})
    out.append({"type": "end", "status": f"{MARK}{text}", "reason": text, "step": 40})
    return out


async def test_every_widget_renders_hostile_records_literally() -> None:
    """One app, many Hypothesis examples: each widget's text refresh, the banner and the
    event log take the poisoned records without raising, and MARK shows literally."""
    app = TuitrainApp(store=MetricStore())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()

        @given(text=hostile_text, number=odd_number)
        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        def check(text: str, number: Any) -> None:
            store = MetricStore()
            sink = TimelineStoreSink(store)
            for rec in poisoned_records(text, number):
                sink.write(rec)
            frame = Frame(store.snapshot())
            app.event_log.reset()
            app.status_bar.refresh_text(frame)
            for panel in app.panels:
                panel.refresh_text(frame)
                panel.refresh_plot(frame.snap)
            app.event_log.refresh_text(frame)
            fail = failure(frame.snap)
            assert fail is not None
            app.banner.show(failure_text(fail, f"runs/{MARK}{text}"), "error")
            shown_banner = text_of(app.banner)
            assert MARK in shown_banner and "\x1b" not in shown_banner
            app.banner.show(alert_text(frame.snap.events[-2]))
            assert MARK in text_of(app.banner)
            assert MARK in text_of(app.status_bar)  # the preset's name, then the state
            overview = next(p for p in app.panels if p.id == "overview")
            summary = text_of(overview.summary_text)
            assert MARK in summary and "\x1b" not in summary
            log = "\n".join(strip.text for strip in app.event_log.lines)
            assert log.count(MARK) >= 3 and "\x1b" not in log
            app.notify(f"{MARK}{text}")

        check()
        await pilot.pause(0.2)  # what was updated is drawn: nothing raises there either
        assert app._exception is None


async def test_text_where_a_number_goes_is_shown() -> None:
    """A hand-edited header: grad_accum = "2" is shown as 2 accumulation steps."""
    store = MetricStore()
    sink = TimelineStoreSink(store)
    for rec in records("fp16", "cuda", 20):
        if rec["type"] == "header":
            rec["config"]["optim"]["grad_accum"] = "2"
            rec["config"]["optim"]["lr"] = "3e-3"
        sink.write(rec)
    app = TuitrainApp(store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        overview = next(p for p in app.panels if p.id == "overview")
        summary = text_of(overview.summary_text)
        assert "x 2 accum" in summary and "lr 0.003 " in summary  # the text read as a number
        assert app._exception is None


def test_compare_table_shows_run_names_literally(tmp_path: Path) -> None:
    rows = []
    for i, name in enumerate(["a[/b]", "b\\"]):
        store = MetricStore()
        sink = TimelineStoreSink(store)
        for rec in records("fp16", "cuda", 20):
            sink.write({**rec, "preset": "[bold"} if rec["type"] == "header" else rec)
        sink.write({"type": "end", "status": "[/]stopped", "reason": "x", "step": 20})
        path = tmp_path / f"run{i}[x]" / "metrics.jsonl"
        source = Source(name, path, store, ("primary", "warning")[i])
        rows.append((source, summarize(store.snapshot(), path)))
    plain = to_content(table_text(rows, 120)).plain
    assert "a[/b]" in plain and "[/]stopped" in plain and "[bold · run0[x]" in plain


INJECT = """
import sys
from tuitrain.ui.widgets.overview import OverviewPanel
calls = [0]
real = OverviewPanel.summary
def planted(self, frame):
    calls[0] += 1
    if calls[0] > 2:
        raise RuntimeError("planted [b]failure[/b]")
    return real(self, frame)
OverviewPanel.summary = planted
from tuitrain.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_failed_dashboard_does_not_lose_the_run(tmp_path: Path) -> None:
    """A widget raises in a live run on a real terminal (pty): the run trains to its end
    headless, its traceback is in the run dir, the end record says the UI failed, exit 1."""
    run_dir = tmp_path / "r[x]"
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    args = ["--run-dir", str(run_dir), "--set", "train.epochs=2", "--set", "train.log_every=5"]
    proc = subprocess.Popen(
        [sys.executable, "-c", INJECT, *args],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    os.set_blocking(master, False)
    output = b""
    deadline = time.monotonic() + 180
    try:
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run never ended"
            try:
                output += os.read(master, 65536)
            except BlockingIOError:
                time.sleep(0.1)
            except OSError:
                time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 1, output[-2000:]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    end = lines[-1]
    assert end["type"] == "end" and end["status"] == "completed", end
    assert end["ui_failed"] == "RuntimeError: planted [b]failure[/b]"
    assert "the dashboard failed" in end["reason"]
    assert any(r.get("kind") == "ui_failed" for r in lines)
    assert sum(r["type"] == "eval" for r in lines) == 2  # both epochs trained
    assert "planted [b]failure[/b]" in (run_dir / "ui-traceback.txt").read_text()
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert b"the dashboard failed" in output


@pytest.mark.parametrize("size", [(40, 10), (30, 8)])
async def test_at_tiny_sizes_nothing_draws_outside_its_panel(size: tuple[int, int]) -> None:
    """Long, wide (emoji) and bracketed text at 40x10 and 30x8: every widget inside a panel,
    the event log or the status bar lies within its parent's box and no line it draws is
    wider than itself (the footer scrolls its keys sideways: not checked)."""
    store = MetricStore()
    sink = TimelineStoreSink(store)
    for rec in poisoned_records("😀" * 30 + "[b]" + "x" * 300, 2):
        sink.write(rec)
    app = TuitrainApp(store=store)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        bad = []
        for top in [*app.panels, app.event_log, app.status_bar, app.banner]:
            for node in [top, *top.walk_children()]:
                if not node.display or not node.size.area:
                    continue
                if node is not top and not top.region.contains_region(node.region):
                    bad.append(f"{node!r} at {node.region} outside {top!r} at {top.region}")
                region = Region(0, 0, node.size.width, node.size.height)
                for strip in node.render_lines(region):
                    if strip.cell_length > node.size.width:
                        bad.append(f"{node!r}: a line of {strip.cell_length} cells in {node.size}")
                        break
        assert not bad, "\n".join(bad)
        assert app._exception is None


async def test_the_preset_picker_shows_names_and_descriptions_literally() -> None:
    from textual.widgets import OptionList

    from tuitrain.ui.screens.presets import PresetScreen

    presets = [("a[/b]", "[bold desc \x1b[31m\x07"), ("b\\", "x" * 2000), (MARK, "")]
    app = TuitrainApp(store=MetricStore())
    async with app.run_test(size=(100, 30)) as pilot:
        await app.push_screen(PresetScreen(presets, current="a[/b]"))
        await pilot.pause(0.2)
        options = app.screen.query_one(OptionList)
        shown = [str(options.get_option_at_index(i).prompt) for i in range(3)]
        assert shown[0].startswith("a[/b]") and "[bold desc [31m" in shown[0]
        assert "\x1b" not in shown[0] and "\x07" not in shown[0]
        assert shown[2].startswith(MARK)
        assert app._exception is None


async def test_the_metrics_screen_shows_hostile_metric_names_literally() -> None:
    """A task's metric names come from the user's code and the records: every chart title
    and the Loss panel show them literally (brackets, escapes, controls), whatever the
    numbers beside them."""
    from tuitrain.ui.screens.metrics import MetricsScreen

    app = TuitrainApp(store=MetricStore())
    async with app.run_test(size=(160, 48)) as pilot:
        screen = MetricsScreen()
        await app.push_screen(screen)
        await pilot.pause()

        @given(text=hostile_text, number=odd_number)
        @settings(
            max_examples=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        def check(text: str, number: Any) -> None:
            name = f"{MARK}{text}"[:64]
            store = MetricStore()
            task = {
                "name": text, "primary": f"val_{name}", "mode": text, "tolerance": number,
                "metrics": [
                    {"name": name, "split": "train", "goal": "max", "format": text},
                    {"name": f"val_{name}", "split": "val", "goal": "min", "format": "pct"},
                ],
            }  # fmt: skip
            store.push({"type": "header", "preset": text, "task": task})
            store.push({"type": "train", "step": 1, "loss": 1.0, name: number})
            store.push({"type": "train", "step": 2, "loss": 0.5, name: 0.25})
            store.push({"type": "eval", "step": 2, "epoch": number, f"val_{name}": number})
            app.store = store
            screen.redraw()
            # the titles as drawn (border_title's getter gives markup back, re-escaped)
            titles = [chart._border_title.plain for chart in screen.charts.values()]
            assert titles and all("\x1b" not in t for t in titles)
            shown = "".join(titles)
            assert MARK in shown
            panel = next(p for p in app.panels if p.id == "loss")
            panel.refresh_text(Frame(store.snapshot()))

        check()
        await pilot.pause(0.2)
        assert app._exception is None
