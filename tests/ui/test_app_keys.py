"""Keys and layout of the engine-less app (fed deterministic records), plus s/f on a live run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.binding import Binding
from textual.widgets import Sparkline, Static

from tests.ui.fake_records import filled_store
from tests.ui.pilot_tools import record_notifications, text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.core.control import MEMORY_ON_CPU
from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore
from tuitrain.ui import app as app_module
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.screens.help import HelpScreen
from tuitrain.ui.screens.profile import ProfileScreen
from tuitrain.ui.widgets.chart import MetricChart

pytestmark = pytest.mark.timeout(120)


def idle_dashboard(monkeypatch: pytest.MonkeyPatch) -> TuitrainApp:
    """The dashboard over a host whose run is never started (its keys, not its run)."""
    monkeypatch.setattr(TuitrainApp, "launch", lambda self, host: None)
    cfg = load_preset("fashion-mini", ["train.device=cpu"])
    return TuitrainApp(host=RunHost(cfg, MetricStore()))


async def test_help_lists_every_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    app = idle_dashboard(monkeypatch)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = text_of(app.screen.query_one("#help-keys"))
        for binding in Binding.make_bindings(TuitrainApp.BINDINGS):
            if binding.action in ("stop_run", "back_to_runs"):  # a viewer's keys only
                assert binding.tooltip not in text
                continue
            if binding.action == "resume":  # space's label while paused; this run is not
                assert binding.tooltip not in text
                continue
            assert binding.description in text and binding.tooltip in text
            assert app.get_key_display(binding) in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        for key in ("h", "f1"):  # htop's and nvitop's help keys too
            await pilot.press(key)
            assert isinstance(app.screen, HelpScreen), key
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)


async def test_a_viewer_offers_only_the_keys_that_act() -> None:
    """Watching records (no host, no control channel): the engine's keys are neither shown
    (footer, help, palette) nor obeyed; q closes the viewer at once."""
    app = TuitrainApp(store=filled_store())
    messages = record_notifications(app)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        footer = {b.action for _, b, enabled, _ in app.screen.active_bindings.values()
                  if enabled and b.show}  # fmt: skip
        assert "toggle_log_y" in footer and "quit" in footer
        for hidden in ("pick_preset", "parity", "toggle_pause", "resume", "checkpoint", "profile"):
            assert hidden not in footer, hidden
        for key in ("space", "s", "f", "p", "c", "m", "x"):
            await pilot.press(key)
        assert messages == [] and app.screen is app.screen_stack[0]
        await pilot.press("question_mark")
        text = text_of(app.screen.query_one("#help-keys"))
        assert "Log y" in text and "Close this viewer" in text
        assert "Preset" not in text and "Save a checkpoint" not in text and "Pause" not in text
        await pilot.press("escape")
        titles = [cmd.title for cmd in app.get_system_commands(app.screen)]
        assert any(t.startswith("Log y") for t in titles)
        assert not any(t.startswith(("Preset", "Save", "Pause")) for t in titles), titles
        badge = app.query_one("#viewing", Static)
        assert text_of(badge) == "VIEWING" and badge.region.y == 0
        assert badge.region.right == 120
        await pilot.press("q")  # a viewer: closes at once, no question
    assert app.return_value == 0


async def test_ctrl_c_quits_a_viewer_without_a_markup_toast() -> None:
    app = TuitrainApp(store=filled_store())
    messages = record_notifications(app)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == 0 and not any("[b]" in m for m in messages)


async def test_command_palette_lists_the_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    app = idle_dashboard(monkeypatch)
    async with app.run_test(size=(120, 36)):
        titles = [cmd.title for cmd in app.get_system_commands(app.screen)]
    for wanted in ("Preset (p)", "Parity (c)", "Pause", "Save (s)", "Profile (f)", "Help"):
        assert any(t.startswith(wanted) for t in titles), (wanted, titles)
    assert not any(t.startswith("Stop run") for t in titles)


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (160, 48), (200, 60)])
async def test_layout_fits(size: tuple[int, int]) -> None:
    """Charts from 100 columns and 30 rows up; sparklines below; every panel on screen."""
    app = TuitrainApp(store=filled_store())
    async with app.run_test(size=size) as pilot:
        app.poll_all()
        await pilot.pause()
        compact = size[0] < 100 or size[1] < 30
        charts = [c for c in app.query(MetricChart) if c.display]
        sparks = [s for s in app.query(Sparkline) if s.display]
        assert (len(sparks), len(charts)) == ((5, 0) if compact else (0, 5))
        for widget in [*app.panels, app.event_log, app.status_bar]:
            region = widget.region
            assert region.width > 0 and region.height > 0, widget
            assert region.right <= size[0] and region.bottom <= size[1] - 1, widget


async def test_a_poll_after_close_does_nothing() -> None:
    """The poll timers may tick once more while the app closes, after its screen is gone
    (seen in CI: NoScreen from poll_text). Such a tick must be a no-op, not a traceback."""
    app = TuitrainApp(store=filled_store())
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
    assert not app.status_bar.is_attached
    app.poll_all()  # raised textual.dom.NoScreen before the guard


async def test_resize_switches_layout() -> None:
    app = TuitrainApp(store=filled_store())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.screen.has_class("-wide")
        await pilot.resize_terminal(80, 24)
        app.poll_all()
        await pilot.pause()
        assert app.screen.has_class("-narrow")
        assert all(not c.display for c in app.query(MetricChart))
        assert app.footer.compact and not app.footer.show_command_palette


@pytest.mark.slow
async def test_checkpoint_and_profile_keys(
    ui_overrides: Callable[..., list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_module, "PROFILE_STEPS", 3)  # the profiler is slow on a CPU
    overrides = ui_overrides(epochs=40)
    app = TuitrainApp(host=RunHost(load_preset("fashion-mini", overrides), MetricStore()))
    messages = record_notifications(app)
    async with app.run_test(size=(120, 36)) as pilot:
        assert app.host is not None
        await wait_for(pilot, lambda: app.host.control.state == "running", what="the first step")
        await pilot.press("s")
        await wait_for(
            pilot,
            lambda: any("checkpoint saved" in m for m in messages),
            what="the checkpoint",
        )
        saved = [e for e in app.store.snapshot().events if e.get("kind") == "checkpoint"]
        assert saved and "(requested)" in saved[-1]["message"]
        await pilot.press("f")
        await wait_for(
            pilot, lambda: isinstance(app.screen, ProfileScreen), timeout=60, what="the profile"
        )
        await wait_for(pilot, lambda: app.screen.query("#profile-table"), what="the table")
        table = text_of(app.screen.query_one("#profile-table"))
        assert "Name" in table and "CPU" in table
        await pilot.press("escape")
        await pilot.press("q", "q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")


async def test_memory_key_on_cpu_says_why_it_does_nothing(
    ui_overrides: Callable[..., list[str]],
) -> None:
    """m on a CPU run: one line saying the snapshot records the CUDA allocator; no request
    reaches the engine. A viewer does not offer the key."""
    idle = TuitrainApp(store=filled_store())
    said = record_notifications(idle)
    async with idle.run_test(size=(120, 36)) as pilot:
        await pilot.press("m")
        assert said == []
    app = TuitrainApp(host=RunHost(load_preset("fashion-mini", ui_overrides()), MetricStore()))
    messages = record_notifications(app)
    async with app.run_test(size=(120, 36)) as pilot:
        assert app.host is not None
        await wait_for(pilot, lambda: app.host.control.state == "running", what="the first step")
        await pilot.press("m")
        assert messages[-1] == MEMORY_ON_CPU
        assert not app.memory_wanted and app.host.control.take_memory_snapshot_request() == 0
        await pilot.press("q", "q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")


@pytest.mark.slow
async def test_a_profile_the_run_never_started_is_said(
    ui_overrides: Callable[..., list[str]],
) -> None:
    """f in the run's last step: the engine has no step left to profile. The app must not
    wait for a table in silence (f's notice promised one)."""
    app = TuitrainApp(host=RunHost(load_preset("fashion-mini", ui_overrides()), MetricStore()))
    messages = record_notifications(app)
    async with app.run_test(size=(120, 36)) as pilot:
        app.profile_wanted = True  # f's request arrived too late for the engine to act on
        await wait_for(pilot, lambda: app.host is not None and not app.host.alive, what="end")
        await wait_for(pilot, lambda: any("nothing was profiled" in m for m in messages))
        assert not app.profile_wanted and not isinstance(app.screen, ProfileScreen)


async def test_plots_redraw_only_on_new_data_and_decimated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Render budget: no redraw without new data; at most ~2 points per plot column."""
    store = filled_store(steps=2000)  # 1,000 train points per series
    draws: list[tuple[int, int]] = []  # (most points in a line, plot columns)
    real_draw = MetricChart.draw

    def counting_draw(self: MetricChart, lines, **kwargs) -> None:  # noqa: ANN001
        draws.append((max((len(line.xs) for line in lines), default=0), self.plot_columns()))
        real_draw(self, lines, **kwargs)

    monkeypatch.setattr(MetricChart, "draw", counting_draw)
    app = TuitrainApp(store=store)
    async with app.run_test(size=(120, 36)) as pilot:
        app.poll_all()
        await pilot.pause()
        first = len(draws)
        assert first >= 5  # once per chart, again if the layout settled after the first
        assert all(points <= 2 * columns for points, columns in draws)
        app.poll_plots()
        app.poll_plots()
        assert len(draws) == first, "redrawn without new data"
        store.push({"type": "event", "level": "info", "message": "not plotted"})
        app.poll_plots()
        assert len(draws) == first, "an event redrew the charts"
        store.push({"type": "train", "step": 2002, "loss": 0.3, "samples_per_s": 4e4})
        app.poll_plots()
        assert len(draws) == first + 2, "only the loss and throughput charts have new data"


async def test_compact_layout_keeps_the_straggler() -> None:
    """At 80x24 the per-rank table does not fit in the two summary lines: the straggler moves
    into one note, at the front of the second line, and comes back as the table when wide."""
    store = filled_store(precision="bf16", device="cpu", steps=40)
    latest = dict(store.snapshot().latest or {})
    latest.update(step=latest["step"] + 10, rank_step_time_s=[0.2, 0.2], rank_busy_s=[0.1, 0.2])
    store.push(latest)
    app = TuitrainApp(store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        wide = text_of(app.query_one("#throughput").query_one(".summary", Static))
        assert "data+fwd" in wide and "⚠ straggler" in wide  # the table
        summary = app.query_one("#throughput").query_one(".summary", Static)
        await pilot.resize_terminal(80, 24)  # no new record: the layout change alone redoes it
        await wait_for(pilot, lambda: "data+fwd" not in text_of(summary), what="compact")
        await pilot.pause()
        compact = text_of(summary).split("\n")
        assert len(compact) == 2 and compact[1].startswith("⚠ rank 1 straggler 1.33× median")
        assert summary.region.height == 2  # nothing cut by the max-height
        await pilot.resize_terminal(160, 48)
        await wait_for(pilot, lambda: "data+fwd" in text_of(summary), what="the table again")
