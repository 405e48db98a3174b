"""`tuitrain runs`' table costs what a key changes, not the table's size: space updates a
cell, `s` reorders the rows held, the filter adds rows only when it keeps other runs, and
the table's rows are always the filter's runs in the sort's order."""

from __future__ import annotations

import pytest
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from tuitrain.commands.runs import RunRow
from tuitrain.ui import runs_app
from tuitrain.ui.runs_app import RunsApp


def rows(count: int) -> list[RunRow]:
    return [
        RunRow(run_dir=f"runs/r{i:03d}", name=f"r{i:03d}", status=("failed", "completed")[i % 2],
               preset="fashion-mini", task="classify", steps=(i * 37) % 101, best=None,
               best_metric=None, best_format="float", samples_per_s=float(i), tokens_per_s=None,
               duration_s=None, started=None)
        for i in range(count)
    ]  # fmt: skip


def on_screen(app: RunsApp) -> list[str]:
    """The run dirs of the table on screen, top to bottom."""
    table = app.table
    assert table.display and all(not t.display for t in app.query(DataTable) if t is not table)
    return [
        str(table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value)
        for i in range(table.row_count)
    ]


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every row added to any DataTable, by key."""
    keys: list[str] = []
    original = DataTable.add_row

    def add_row(self, *cells, key=None, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        keys.append(key)
        return original(self, *cells, key=key, **kw)

    monkeypatch.setattr(DataTable, "add_row", add_row)
    return keys


async def test_keys_add_only_the_rows_a_new_filter_keeps(
    added: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs_app, "FILTER_DELAY_S", 600)  # as you type: only Enter applies
    app = RunsApp(rows(40))
    async with app.run_test(size=(140, 30)) as pilot:
        assert len(added) == 40 and on_screen(app) == [r.run_dir for r in app.rows]
        added.clear()
        await pilot.press("space", "space")  # mark two runs: two cells change
        assert app.marked == {"runs/r000", "runs/r001"}
        assert str(app.table.get_cell("runs/r001", "mark")) == "●"
        await pilot.press("s", "s", "s", "s")  # by run, status, preset, steps
        assert added == []  # no row added by marking or sorting
        assert on_screen(app) == [r.run_dir for r in app.shown]
        assert [r.steps for r in app.shown] == sorted((r.steps for r in app.rows), reverse=True)

        await pilot.press("slash", "r", "0", "1", "enter")  # r010..r019
        assert sorted(added) == [f"runs/r01{i}" for i in range(10)]
        assert on_screen(app) == [r.run_dir for r in app.shown]
        assert [r.steps for r in app.shown] == sorted((r.steps for r in app.shown), reverse=True)
        added.clear()
        await pilot.press("slash", "enter")  # the same filter again: nothing to add
        await pilot.press("space")  # marks in the filter's table and in the whole one
        marked = app.shown[0].run_dir
        await pilot.press("s")  # by best: the filter's rows reordered, none added
        assert added == [] and on_screen(app) == [r.run_dir for r in app.shown]

        await pilot.press("slash", *["backspace"] * 3, "enter")  # cleared: every run again
        assert added == []  # the table of every run was kept, only re-sorted
        assert on_screen(app) == [r.run_dir for r in app.shown] and len(app.shown) == 40
        assert str(app.table.get_cell(marked, "mark")) == "●"
        await pilot.press("q")


async def test_a_hostile_filter_is_literal_text(added: list[str]) -> None:
    app = RunsApp(rows(12))
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("slash", *"(a+)+$", "enter")
        assert app.shown == [] and on_screen(app) == []
        await pilot.press("slash", *["backspace"] * 6, *"R00", "enter")  # case-insensitive
        assert [r.name for r in app.shown] == [f"r00{i}" for i in range(10)]
        await pilot.press("enter")
    assert app.choice == ("watch", ["runs/r000"])
