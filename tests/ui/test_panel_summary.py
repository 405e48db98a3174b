"""A panel summary's height follows its wrapped text, though most updates skip the layout."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Static

from tests.ui.fake_records import filled_store
from tests.ui.pilot_tools import text_of
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.widgets.panel import update_summary
from tuitrain.ui.widgets.status import StatusBar


class SummaryApp(App[None]):
    CSS = "#summary { height: auto; width: 20; } #below { height: 1; }"

    def compose(self) -> ComposeResult:
        yield Static("", id="summary")
        yield Static("below", id="below")


async def test_summary_grows_and_shrinks_with_wrapping() -> None:
    app = SummaryApp()
    async with app.run_test(size=(40, 10)) as pilot:
        summary = app.query_one("#summary", Static)
        below = app.query_one("#below", Static)
        update_summary(summary, "one line")
        await pilot.pause()
        assert summary.size.height == 1
        assert below.region.y == 1

        # Longer than 20 cells with no "\n": wraps onto a second line, so a layout is needed.
        update_summary(summary, "a line that is long enough to wrap")
        await pilot.pause()
        assert summary.size.height == 2
        assert below.region.y == 2

        # Same height, new text: shown (no layout needed for that).
        update_summary(summary, "another line which also wraps")
        await pilot.pause()
        assert summary.size.height == 2
        assert "another line" in str(summary.render())

        update_summary(summary, "short\nagain\nthree")
        await pilot.pause()
        assert summary.size.height == 3
        update_summary(summary, "short")
        await pilot.pause()
        assert summary.size.height == 1
        assert below.region.y == 1


async def test_same_height_update_skips_the_layout() -> None:
    app = SummaryApp()
    async with app.run_test(size=(40, 10)) as pilot:
        summary = app.query_one("#summary", Static)
        update_summary(summary, "step 1")
        await pilot.pause()
        update_summary(summary, "step 2")
        assert not summary._layout_required  # the text changed, its height did not
        update_summary(summary, "step 3 and a tail long enough to wrap")
        assert summary._layout_required


async def test_gpu_memory_apart_from_the_allocator_and_tf32_in_the_status() -> None:
    """A wide dashboard of an fp32 CUDA run: the allocator's figures on one line, the GPU's
    memory in use by every process (NVML) on the other, and fp32 said to be TF32."""
    app = TuitrainApp(store=filled_store("fp32", "cuda"))
    async with app.run_test(size=(200, 50)) as pilot:
        app.poll_all()
        await pilot.pause()
        memory = text_of(app.query_one("#memory").query_one(".summary", Static))
        first, second = memory.splitlines()
        assert "alloc 1.22 GiB" in first and "reserved" in first and "peak" in first
        assert second == "GPU in use 2.60 GiB / 140 GiB (2%) (all processes) · util 87%"
        assert "fp32 (TF32)" in text_of(app.query_one(StatusBar))


def test_overview_names_label_smoothing_only_when_it_is_on() -> None:
    from tests.ui.fake_records import records
    from tuitrain.metrics import MetricStore
    from tuitrain.ui.view import Frame
    from tuitrain.ui.widgets.overview import OverviewPanel

    def optim_line(smoothing: float | None) -> str:
        store = MetricStore()
        for rec in records("bf16", "cpu", steps=4):
            if rec["type"] == "header" and smoothing is not None:
                rec["config"]["train"]["label_smoothing"] = smoothing
            store.push(rec)
        text = OverviewPanel().summary(Frame(store.snapshot()))
        return next(line for line in text.splitlines() if "optim[/]" in line)

    assert optim_line(0.1).endswith("warmup 50 · label smoothing 0.1")
    assert "smoothing" not in optim_line(0.0) and "smoothing" not in optim_line(None)


def test_loss_panel_shows_the_smoothing_floor_and_the_best_epoch() -> None:
    import math

    from tests.ui.fake_records import records
    from tuitrain.metrics import MetricStore
    from tuitrain.ui.view import Frame
    from tuitrain.ui.widgets.loss import LossPanel

    def summary(smoothing: float, accs: list[float]) -> str:
        store = MetricStore()
        for rec in records("bf16", "cpu", steps=4):
            if rec["type"] == "header":
                rec["config"]["train"]["label_smoothing"] = smoothing
                rec["config"]["data"]["num_classes"] = 10
            if rec["type"] != "eval":
                store.push(rec)
        for epoch, acc in enumerate(accs, 1):
            store.push({"type": "eval", "step": 10 * epoch, "epoch": epoch, "val_loss": 0.3,
                        "val_acc": acc})  # fmt: skip
        return LossPanel().summary(Frame(store.snapshot()))

    # eps = 0.1 over 10 classes: -(0.91 ln 0.91 + 9 * 0.01 ln 0.01)
    floor = -(0.91 * math.log(0.91) + 0.09 * math.log(0.01))
    assert f"floor {floor:.3f} (smoothing)" in summary(0.1, [0.9])
    assert "floor" not in summary(0.0, [0.9])
    dipped = summary(0.0, [0.90, 0.93, 0.92])
    assert "acc 92.00%" in dipped and "best 93.00% (epoch 2)" in dipped
    assert "best" not in summary(0.0, [0.90, 0.93])  # the latest is the best


def test_a_failure_banner_offers_only_the_keys_that_act() -> None:
    """The hosted dashboard can start a preset after a failure (`p`); a viewer or a script's
    view cannot, and a script's traceback is in output.log (or only the event log)."""
    from tuitrain.ui.view import Failure
    from tuitrain.ui.widgets.banner import failure_text

    fail = Failure("ValueError: shapes do not match", None, "Traceback ...")
    hosted = failure_text(fail, "runs/a")
    assert "pick a preset" in hosted and "runs/a/train.log" in hosted
    script = failure_text(fail, "runs/s", can_pick=False, log="output.log")
    assert "pick a preset" not in script and "q[/b] closes the view" in script
    assert "runs/s/output.log" in script
    direct = failure_text(fail, "runs/d", can_pick=False, log=None)
    assert "train.log" not in direct and "in the event log" in direct


def test_a_script_runs_traceback_is_looked_for_where_it_is(tmp_path) -> None:
    from tuitrain.ui.app import log_of

    assert log_of(str(tmp_path), script=False) == "train.log"
    assert log_of(str(tmp_path), script=True) is None  # run directly: no output.log
    (tmp_path / "output.log").write_text("Traceback ...\n")
    assert log_of(str(tmp_path), script=True) == "output.log"
