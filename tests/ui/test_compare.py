"""`tuitrain watch --compare A B`: two runs' files followed live and overlaid.

Records in the metric contract's shape (tests/ui/fake_records.py), written to real files, read
by real followers; B is fp32's run at 1.25x the samples/s and 0.42 point less accuracy, so the
ratio and the gap the screen shows are known.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.ui.fake_records import records
from tests.ui.pilot_tools import text_of, wait_for
from tests.ui.test_watch import write_lines
from tuitrain.cli import main as cli_main
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.ui.compare import COLORS, NAMES, CompareApp, Source
from tuitrain.ui.screens.help import HelpScreen

pytestmark = pytest.mark.timeout(120)

STEPS = 400
LAST_STEP = f"{STEPS:>10}"  # the step column as the table shows it


def run_a() -> list[dict]:
    return [*records("fp32", "cpu", steps=STEPS), end_record()]


def run_b(*, end: bool = True) -> list[dict]:
    out = []
    for rec in records("bf16", "cpu", steps=STEPS):
        rec = dict(rec)
        if rec["type"] == "train":
            rec["samples_per_s"] *= 1.25
            rec["tflops"] *= 1.25  # the same model: FLOPs per sample x samples/s
        elif rec["type"] == "eval":
            rec["val_acc"] -= 0.0042
        out.append(rec)
    return [*out, end_record()] if end else out


def end_record() -> dict:
    return {"type": "end", "status": "completed", "reason": "done", "step": STEPS}


def write_run(run_dir: Path, recs: list[dict]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "metrics.jsonl"
    write_lines(path, recs)
    return path


def sources(*paths: Path) -> list[Source]:
    return [
        Source(name, path, MetricStore(), color)
        for name, path, color in zip(NAMES, paths, COLORS, strict=False)
    ]


def table(app: CompareApp) -> str:
    return text_of(app.table)


def rows(app: CompareApp) -> dict[str, str]:
    """The table's run rows by run name (A, B); empty strings before the first poll."""
    found = {line.split()[1]: line for line in table(app).splitlines() if line.startswith("■")}
    return {"A": "", "B": "", **found}


# ---------------------------------------------------------------------------------- live
async def test_compare_follows_a_live_run_against_a_finished_one(tmp_path: Path) -> None:
    path_a = write_run(tmp_path / "fp32-run", run_a())
    path_b = tmp_path / "bf16-run" / "metrics.jsonl"
    path_b.parent.mkdir()
    srcs = sources(path_a, path_b)
    followers = [JsonlFollower(s.path, s.store, poll_s=0.05) for s in srcs]
    for follower in followers:
        follower.poll()
        follower.start()
    recs_b = run_b()
    half = next(i for i, r in enumerate(recs_b) if r["type"] == "train" and r["step"] > STEPS // 2)
    first_half, second_half = recs_b[:half], recs_b[half:]
    app = CompareApp(srcs)
    writer = threading.Thread(target=write_lines, args=(path_b, second_half, 0.003))
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: "waiting" in rows(app)["B"], what="B waiting")
            assert "fashion-fp32 · fp32-run" in rows(app)["A"]
            assert "completed" in rows(app)["A"] and LAST_STEP in rows(app)["A"]

            write_lines(path_b, first_half)  # the run starts: half of it at once
            await wait_for(pilot, lambda: "running" in rows(app)["B"], what="B running")
            assert "fashion-bf16 · bf16-run" in rows(app)["B"]
            assert f"{STEPS // 2:>10}" in rows(app)["B"]
            assert "(not final)" in text_of(app.comparison)

            writer.start()  # then line by line, as a live run writes
            await wait_for(pilot, lambda: "completed" in rows(app)["B"], what="B completed")
            assert LAST_STEP in rows(app)["B"]
            comparison = text_of(app.comparison)
            assert "B/A ×1.25" in comparison  # median samples/s, B over A
            assert "TFLOP/s B/A ×1.25" in comparison
            assert "1.11" in rows(app)["A"] and "1.39" in rows(app)["B"]  # median TFLOP/s
            assert "B−A -0.42 pt" in comparison and "not final" not in comparison
            # The charts catch up at 1 Hz, from B's latest series (A's header, loss, B's...).
            b_loss = srcs[1].store.snapshot().series["loss"]
            await wait_for(pilot, lambda: app.charts[0]._data[3] is b_loss, what="B's curve")
            assert app.charts[0]._data[3].xs[-1] == STEPS

            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("q")
    finally:
        if writer.ident is not None:
            writer.join()
        for follower in followers:
            follower.stop()


async def test_same_file_twice_compares_equal(tmp_path: Path) -> None:
    path = write_run(tmp_path / "fp32-run", run_a())
    srcs = sources(path, path)
    for s in srcs:
        JsonlFollower(s.path, s.store).poll()
    app = CompareApp(srcs)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.poll_all()
        assert rows(app)["A"].split(maxsplit=2)[2] == rows(app)["B"].split(maxsplit=2)[2]
        assert "B/A ×1.00" in text_of(app.comparison)
        assert "B−A +0.00 pt" in text_of(app.comparison)
    assert not app.table.is_attached
    app.poll_all()  # a timer tick while the app closes is a no-op, not NoScreen


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_fits_small_and_large_terminals(tmp_path: Path, size: tuple[int, int]) -> None:
    srcs = sources(
        write_run(tmp_path / "fashion-fp32-20261129-120000", run_a()),
        write_run(tmp_path / "fashion-bf16-20261129-120500", run_b()),
    )
    for s in srcs:
        JsonlFollower(s.path, s.store).poll()
    app = CompareApp(srcs)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.poll_all()
        await pilot.pause()
        width = app.table.content_region.width
        lines = table(app).splitlines()
        assert len(lines) == 3 and all(len(line) <= width for line in lines)
        # the FLOP columns give way first: the labels tell the runs apart
        assert ("TFLOP/s" in lines[0]) == (size[0] >= 100)
        assert all(line.endswith("%") for line in lines[1:])  # the last column is visible
        for chart in app.charts:  # both charts on screen, drawn, at least 6 rows tall
            assert chart.region.height >= 6 and chart.region.right <= size[0]
            assert chart._data
        wide = app.charts[0].region.y == app.charts[1].region.y
        assert wide == (size[0] >= 120)  # side by side on wide terminals, stacked below


# ---------------------------------------------------------------------------------- snapshot
async def settle(pilot: Pilot) -> None:
    await pilot.pause()
    app = pilot.app
    assert isinstance(app, CompareApp)
    app.poll_all()
    await pilot.pause()


def test_compare_screen_100x30(snap_compare, tmp_path: Path) -> None:  # noqa: ANN001
    srcs = sources(
        write_run(tmp_path / "fp32-run", run_a()),
        write_run(tmp_path / "bf16-run", run_b(end=False)),
    )
    for s in srcs:
        JsonlFollower(s.path, s.store).poll()
    assert snap_compare(CompareApp(srcs), terminal_size=(100, 30), run_before=settle)


# ---------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "no-such-run", "no-such-run is not a run dir or a metrics.jsonl"),
        (lambda tmp: tmp / "empty", "empty is not a run dir (it has no metrics.jsonl"),
        (lambda tmp: tmp / "notes.txt", "notes.txt is not a tuitrain metrics file"),
    ],
    ids=["missing", "not-a-run-dir", "not-a-metrics-file"],
)
def test_bad_targets_exit_2_with_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    good = write_run(tmp_path / "fp32-run", run_a()[:3])
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not json\n")
    bad = make(tmp_path)  # type: ignore[operator]
    code = cli_main(["watch", "--compare", str(good.parent), str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "; pass " in err  # what is wrong, then the fix
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [([], "takes 2 to 8 runs, got 1: add one"), (list("abcdefgh"), "got 9: drop some")],
    ids=["one", "nine"],
)
def test_compare_takes_two_to_eight(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    args = ["watch", "--compare", "a", *extra]
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_compare_command_exit_code_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "watch", "--compare", str(tmp_path), "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"tuitrain watch: error: {tmp_path} is not a run dir")
    assert "Traceback" not in proc.stderr


def test_a_starting_run_is_waited_for(tmp_path: Path) -> None:
    """A run dir with its config.toml but no metrics.jsonl yet (a run starting) is accepted;
    a dir with nothing of a run in it is not."""
    from tuitrain.commands.watch import WatchError, check_target

    starting = tmp_path / "starting"
    starting.mkdir()
    (starting / "config.toml").write_text("# resolved config\n")
    assert check_target(str(starting), strict=True) == starting / "metrics.jsonl"
    (tmp_path / "other").mkdir()
    with pytest.raises(WatchError, match="is not a run dir"):
        check_target(str(tmp_path / "other"), strict=True)


def test_a_run_silent_without_an_end_reads_silent(tmp_path: Path) -> None:
    import os
    import time

    from tuitrain.ui.compare import summarize

    path = tmp_path / "metrics.jsonl"
    write_lines(path, [r for r in records("bf16", "cpu", steps=40) if r["type"] != "end"])
    store = MetricStore()
    JsonlFollower(path, store).poll()
    assert summarize(store.snapshot(), path).state == "running"
    old = time.time() - 600
    os.utime(path, (old, old))
    assert summarize(store.snapshot(), path).state == "silent"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_four_runs_against_the_first(tmp_path: Path, size: tuple[int, int]) -> None:
    """2 to 8 runs: a row each, a comparison line each against A, and a third chart (the
    primary metric) with every run's colour."""
    paths = [write_run(tmp_path / "a", run_a()), write_run(tmp_path / "b", run_b())]
    for name, factor in (("c", 0.8), ("d", 1.5)):
        recs = []
        for rec in run_a():
            rec = dict(rec)
            if rec["type"] == "train":
                rec["samples_per_s"] *= factor
            recs.append(rec)
        paths.append(write_run(tmp_path / name, recs))
    srcs = sources(*paths)
    for s in srcs:
        JsonlFollower(s.path, s.store).poll()
    app = CompareApp(srcs)
    async with app.run_test(size=size) as pilot:
        app.poll_all()
        await pilot.pause()
        found = rows(app)
        assert all(found[n] for n in "ABCD") and "completed" in found["D"]
        lines = text_of(app.comparison).splitlines()
        assert len(lines) == 3
        assert "B/A ×1.25" in lines[0] and "C/A ×0.80" in lines[1] and "D/A ×1.50" in lines[2]
        assert "B−A -0.42 pt" in lines[0] and "C−A +0.00 pt" in lines[1]
        assert len(app.charts) == 3 and app.charts[2].metric == "val_acc"
        await wait_for(pilot, lambda: all(c.legend for c in app.charts if c.size.area), 5)
        assert "D" in app.charts[0].legend
