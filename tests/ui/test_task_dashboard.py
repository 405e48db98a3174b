"""A user's task in the live dashboard (fp32 and bf16), in `watch` and `watch --compare`, and
`p` switching a live dashboard from the CNN to the language model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.engine import run
from tuitrain.host.run import RunHost
from tuitrain.metrics.sinks import JsonlSink
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.ui.app import TEXT_INTERVAL_S, TuitrainApp
from tuitrain.ui.compare import Source, summarize, table_text
from tuitrain.ui.screens.metrics import MetricsScreen
from tuitrain.ui.widgets.loss import LossPanel

REGRESSION = str(Path(__file__).resolve().parents[1] / "tasks" / "regression.toml")
pytestmark = pytest.mark.timeout(180)


def loss_summary(app: TuitrainApp) -> str:
    panel = next(p for p in app.panels if isinstance(p, LossPanel))
    return text_of(panel.summary_text)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
async def test_a_user_task_trains_live_in_the_dashboard(tmp_path: Path, precision: str) -> None:
    overrides = [f"train.precision={precision}", f'run.run_dir="{tmp_path / "run"}"']
    cfg = load_preset(REGRESSION, overrides)
    app = TuitrainApp(host=RunHost(cfg, MetricStore()), overrides=overrides)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.host is not None and not app.host.alive, what="the end")
        await pilot.pause(TEXT_INTERVAL_S + 0.1)
        text = loss_summary(app)
        assert "mae " in text and "acc" not in text
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        # every series: the loss first, then the task's metrics, then lr, grad norm ...
        own = ["loss", "val_loss", "mae", "val_mae"]
        await wait_for(pilot, lambda: list(screen.charts)[:4] == own)
        assert {"lr", "grad_norm", "samples_per_s", "step_time_s"} <= set(screen.charts)
        await wait_for(pilot, lambda: screen.charts["val_mae"].plt.monitor.y, 5, "a drawn chart")
        assert len(screen.charts["val_mae"].plt.monitor.y[0]) == 3  # one point per epoch
        await pilot.press("escape", "q")
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
    assert app.return_value == 0


def regression_run(run_dir: Path, *overrides: str) -> Path:
    run_dir.mkdir(parents=True)
    sink = JsonlSink(run_dir / "metrics.jsonl")
    try:
        run(load_preset(REGRESSION, ["train.epochs=1", *overrides]), sink)
    finally:
        sink.close()
    return run_dir / "metrics.jsonl"


async def test_watch_shows_a_finished_tasks_metrics(tmp_path: Path) -> None:
    path = regression_run(tmp_path / "run")
    store = MetricStore()
    JsonlFollower(path, store).poll()
    app = TuitrainApp(store=store)
    app.watched_path = path
    async with app.run_test(size=(160, 48)) as pilot:
        app.poll_all()
        await pilot.pause()
        assert "mae " in loss_summary(app)
        await pilot.press("g")
        await wait_for(pilot, lambda: "val_mae" in getattr(app.screen, "charts", {}))


def test_compare_puts_the_primary_metric_in_its_column(tmp_path: Path) -> None:
    a = regression_run(tmp_path / "a")
    b = regression_run(tmp_path / "b", "optim.lr=3e-2")
    rows = []
    for name, path in (("A", a), ("B", b)):
        store = MetricStore()
        JsonlFollower(path, store).poll()
        rows.append((Source(name, path, store, "primary"), summarize(store.snapshot(), path)))
    assert rows[0][1].metric_key == "val_mae" and rows[0][1].metric is not None
    table = table_text(rows, 160)
    assert "val_mae" in table and "val acc" not in table


@pytest.mark.slow
async def test_p_switches_a_live_dashboard_from_the_cnn_to_the_language_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    presets = tmp_path / "config" / "tuitrain" / "presets"
    presets.mkdir(parents=True)
    (presets / "tiny-lm.toml").write_text(
        '[preset]\ndescription = "a tiny charlm for the switch test"\n[task]\nname = "charlm"\n'
        '[model]\nname = "gpt"\nlayers = 1\nheads = 2\nwidth = 32\n'
        '[data]\nname = "shakespeare"\ncontext = 32\nbatch_size = 8\nval_samples = 16\n'
        '[train]\nmax_steps = 6\nlog_every = 2\nprecision = "fp32"\ncompile = "off"\n'
        'device = "cpu"\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    overrides = ["data.train_samples=512", "data.val_samples=256", "data.batch_size=64",
                 "train.log_every=2", "train.pace_s=0.05", "train.device=cpu",
                 "train.epochs=40", f'run.run_dir="{tmp_path / "cnn"}"']  # fmt: skip
    app = TuitrainApp(host=RunHost(load_preset("fashion-mini", overrides), MetricStore()))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: (app.store.snapshot().latest or {}).get("step", 0) >= 2)
        await pilot.press("p")
        from textual.widgets import OptionList

        await wait_for(pilot, lambda: app.screen.query(OptionList), what="the picker")
        options = app.screen.query_one(OptionList)
        names = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert "charlm-mini" in names  # the shipped LM preset is offered
        options.highlighted = names.index("tiny-lm")
        await pilot.press("enter")

        def lm_evaluated() -> bool:
            snap = app.store.snapshot()
            return (snap.header or {}).get("task", {}).get("name") == "charlm" and bool(
                snap.last_eval
            )

        await wait_for(pilot, lm_evaluated, 120, "the LM's evaluation")
        await pilot.pause(TEXT_INTERVAL_S + 0.1)
        assert "bpc " in loss_summary(app)
        assert any(e.get("kind") == "sample" for e in app.store.snapshot().events)
        await pilot.press("q", "q")  # q asks first over a live run; q again stops
        await wait_for(pilot, lambda: not app.is_running, what="the exit")


async def test_shift_c_opens_the_parity_check_with_a_control(tmp_path: Path) -> None:
    from tuitrain.ui.screens.parity import ParityScreen

    overrides = ["train.pace_s=0.05", f'run.run_dir="{tmp_path / "run"}"', "train.epochs=50"]
    app = TuitrainApp(host=RunHost(load_preset(REGRESSION, overrides), MetricStore()))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: (app.store.snapshot().latest or {}).get("step", 0) >= 2)
        await pilot.press("C")
        screen = app.screen
        assert isinstance(screen, ParityScreen) and screen.with_control
        assert "control" in text_of(screen.query_one("#parity-note"))
        await pilot.press("escape")  # cancels the check: the screen closes once it stopped
        await wait_for(pilot, lambda: not isinstance(app.screen, ParityScreen), 60, "closed")
        await pilot.press("q", "q")  # q asks first over a live run; q again stops
        await wait_for(pilot, lambda: not app.is_running, what="the exit")
