"""The terminal table of `tuitrain runs`: Enter watches, space marks, c compares, s sorts,
/ filters."""

from __future__ import annotations

from pathlib import Path

from tests.test_runs import folder_of_runs
from tuitrain.commands.runs import list_runs
from tuitrain.ui.runs_app import RunsApp


async def test_the_table_opens_watch_and_compares_two_marked(tmp_path: Path) -> None:
    rows = list_runs(folder_of_runs(tmp_path))
    app = RunsApp(rows)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("space", "space")  # mark lm and dead
        await pilot.press("c")
    assert app.return_value == ("compare", [rows[0].run_dir, rows[1].run_dir])
    app = RunsApp(rows)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("slash", "d", "o", "n", "e", "enter")  # filter: the done run only
        assert [r.name for r in app.shown] == ["done"]
        await pilot.press("enter")
    assert app.return_value == ("watch", [rows[2].run_dir])


async def test_s_sorts_by_the_next_column(tmp_path: Path) -> None:
    app = RunsApp(list_runs(folder_of_runs(tmp_path)))
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("s")  # by run name
        assert [r.name for r in app.shown] == ["dead", "done", "lm", "old"]
        await pilot.press("s")  # by status
        assert [r.status for r in app.shown] == ["completed", "crashed", "running", "silent"]
        await pilot.press("q")
