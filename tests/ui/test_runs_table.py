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
    assert app.choice == ("compare", [rows[0].run_dir, rows[1].run_dir])
    app = RunsApp(rows)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("slash", "d", "o", "n", "e", "enter")  # filter: the done run only
        assert [r.name for r in app.shown] == ["done"]
        await pilot.press("enter")
    assert app.choice == ("watch", [rows[2].run_dir])


async def test_s_sorts_by_the_next_column(tmp_path: Path) -> None:
    app = RunsApp(list_runs(folder_of_runs(tmp_path)))
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("s")  # by run name
        assert [r.name for r in app.shown] == ["dead", "done", "lm", "old"]
        await pilot.press("s")  # by status
        assert [r.status for r in app.shown] == ["completed", "crashed", "running", "silent"]
        await pilot.press("q")


async def test_a_stop_signal_leaves_the_table_as_in_every_app(tmp_path: Path) -> None:
    """SIGTERM, SIGINT and SIGHUP (the terminal gone) end the runs table with their exit
    codes, through the same handling as the dashboard and the viewers (`StoppingApp`)."""
    import signal

    from tuitrain.host.signals import SIGNAL_NAMES
    from tuitrain.ui.stopping import StoppingApp

    app = RunsApp(list_runs(folder_of_runs(tmp_path)))
    async with app.run_test(size=(140, 30)) as pilot:
        assert app._remove_signal_handlers is not None  # taken through the event loop
        assert isinstance(app, StoppingApp)  # and its drivers that survive a hang-up
        await pilot.press("space")
        app.on_stop_signal(*SIGNAL_NAMES[signal.SIGHUP])  # what the loop's handler calls
        await pilot.pause()
    assert app.return_value == 129 and app.signal_exit_code == 129 and app.choice is None
