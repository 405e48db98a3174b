"""`tuitrain runs`: the filter applies as you type, sorting by best follows each metric's
declared mode, and the table comes back after the view it opened, marks and filter kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from tests.test_runs import folder_of_runs
from tests.ui.pilot_tools import wait_for
from tuitrain.commands import runs as runs_command
from tuitrain.commands import watch as watch_command
from tuitrain.commands.runs import RunRow, list_runs
from tuitrain.host import stdio
from tuitrain.ui.runs_app import RunsApp, TableState

pytestmark = pytest.mark.timeout(120)


def run(name: str, best: float | None, metric: str | None, mode: str) -> RunRow:
    return RunRow(run_dir=f"runs/{name}", name=name, status="completed", preset="p", task="t",
                  steps=10, best=best, best_metric=metric, best_format="float",
                  samples_per_s=None, tokens_per_s=None, duration_s=None, started=None,
                  best_mode=mode)  # fmt: skip


async def test_the_filter_applies_as_you_type(tmp_path: Path) -> None:
    app = RunsApp(list_runs(folder_of_runs(tmp_path)))
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("slash", *"don")  # no Enter
        await wait_for(pilot, lambda: app.pattern == "don", 10, "the filter as typed")
        assert [r.name for r in app.shown] == ["done"]
        box = app.query_one("#filter", Input)
        assert box.has_focus
        await pilot.press("escape")  # closes the box, keeps the filter
        assert not box.has_class("-open") and app.pattern == "don"
        assert [r.name for r in app.shown] == ["done"]
        await pilot.press("escape")  # at the table: clears it
        assert app.pattern == "" and len(app.shown) == 4
        await pilot.press("q")


async def test_best_sorts_by_each_metrics_declared_mode() -> None:
    rows = [run("acc-low", 0.70, "val_acc", "max"), run("loss-high", 2.0, "val_loss", "min"),
            run("none", None, None, "max"), run("acc-high", 0.90, "val_acc", "max"),
            run("loss-low", 1.5, "val_loss", "min")]  # fmt: skip
    app = RunsApp(rows)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press(*["s"] * 5)  # run, status, preset, steps, best
        assert "sorted by best" in str(app.query_one("#title").visual)
        names = [r.name for r in app.shown]
        assert names == ["acc-high", "acc-low", "loss-low", "loss-high", "none"]
        await pilot.press("q")


def test_a_runs_best_mode_comes_from_its_header(tmp_path: Path) -> None:
    by_name = {r.name: r for r in list_runs(folder_of_runs(tmp_path))}
    assert by_name["lm"].best_mode == "min" and by_name["lm"].best == 1.9
    assert by_name["done"].best_mode == "max" and by_name["done"].best == 0.80


async def test_the_table_comes_back_as_it_was(tmp_path: Path) -> None:
    rows = list_runs(folder_of_runs(tmp_path))
    kept = TableState({rows[0].run_dir, rows[1].run_dir}, "don", 0, rows[2].run_dir)
    app = RunsApp(rows, kept)
    async with app.run_test(size=(140, 30)) as pilot:
        assert app.marked == kept.marked and app.pattern == "don" and app.sort_column == 0
        assert app.query_one("#filter", Input).value == "don"
        assert [r.name for r in app.shown] == ["done"]
        current = app.current()
        assert current is not None and current.run_dir == rows[2].run_dir
        assert app.state() == kept
        await pilot.press("enter")  # watch it: what to keep is taken as the table closes
    assert app.choice == ("watch", [rows[2].run_dir]) and app.kept == kept


def test_escape_or_q_in_a_view_brings_the_table_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runs -> watch (closed with q or Escape: exit 0) -> the table again, its state kept;
    q at the table leaves. A view that ends with a signal's code ends `runs` with it."""
    folder = folder_of_runs(tmp_path)
    monkeypatch.setattr(stdio, "can_draw_ui", lambda **_: None)
    tables: list[RunsApp] = []
    opened: list[tuple[list[str], Any]] = []
    script = iter(["mark-and-watch", "quit"])

    def fake_run(self: RunsApp, **_: Any) -> int:
        tables.append(self)
        step = next(script)
        if step == "mark-and-watch":
            self.kept = TableState({self.rows[0].run_dir}, "o", 2, self.rows[1].run_dir)
            self.choice = ("watch", [self.rows[1].run_dir])
        return 0

    def fake_watch(argv: list[str], back_to: str | None = None) -> int:
        opened.append((argv, back_to))
        return 0

    monkeypatch.setattr(RunsApp, "run", fake_run)
    monkeypatch.setattr(watch_command, "main", fake_watch)
    assert runs_command.main([str(folder)]) == 0
    assert len(tables) == 2 and opened[0][1] == "runs"
    assert opened[0][0][0] == "--"  # a run named -h is a run
    second = tables[1]
    assert second.restore == tables[0].kept and second.marked == {tables[0].rows[0].run_dir}

    script = iter(["mark-and-watch"])
    tables.clear()
    monkeypatch.setattr(watch_command, "main", lambda argv, back_to=None: 129)
    assert runs_command.main([str(folder)]) == 129  # the terminal went away in the view
    assert len(tables) == 1


async def test_ctrl_c_leaves_the_table_as_q_does(tmp_path: Path) -> None:
    """ctrl+c quits (Textual's own ctrl+c only showed a toast with raw markup in it)."""
    app = RunsApp(list_runs(folder_of_runs(tmp_path)))
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not app.is_running, 5, "the exit")
    assert app.choice is None and app.return_value in (0, None)
