"""The run's state is the truth: a resumed run shows as running, not as its earlier end; a
run whose writer is gone without an end record (kill -9, the OOM killer) shows as crashed
at once, in watch's status and banner and in compare's table; a special file where watch
reads its metrics is refused at once, and a follower never blocks on one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_special_files import KINDS
from tests.ui.fake_records import records
from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.commands.watch import WatchError, check_target
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.rundir.layout import LOCK_NAME
from tuitrain.rundir.lock import writer_gone
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.compare import summarize
from tuitrain.ui.widgets.banner import Banner
from tuitrain.ui.widgets.status import StatusBar

pytestmark = pytest.mark.timeout(60)

HOLD = """
import fcntl, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
time.sleep(120)
"""


def write(path: Path, recs: list[dict]) -> None:
    with open(path, "a") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")


def holder(run_dir: Path) -> subprocess.Popen[str]:
    """A process holding the run dir's lock, as a live writer does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir / LOCK_NAME)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_resumed_run_runs_again_in_the_store() -> None:
    store = MetricStore()
    recs = records("bf16", "cpu", steps=20)
    for rec in recs:
        store.push(rec)
    store.push({"type": "end", "status": "stopped", "reason": "SIGTERM", "step": 20})
    assert store.snapshot().end is not None
    store.push(recs[0])  # --resume appends a new header to the same file
    assert store.snapshot().end is None


def test_writer_gone_follows_the_lock(tmp_path: Path) -> None:
    assert not writer_gone(tmp_path)  # no lock file: nothing to tell
    proc = holder(tmp_path)
    try:
        assert not writer_gone(tmp_path)  # held: alive
    finally:
        proc.kill()  # SIGKILL: no end record, the kernel drops the lock
        proc.wait()
    assert writer_gone(tmp_path)


@pytest.mark.slow
async def test_watch_shows_a_killed_run_as_crashed_and_a_resumed_one_as_running(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metrics.jsonl"
    recs = [r for r in records("bf16", "cpu", steps=40) if r["type"] != "end"]
    write(path, recs)
    proc = holder(tmp_path)
    store = MetricStore()
    follower = JsonlFollower(path, store, poll_s=0.1)
    follower.start()
    app = TuitrainApp(store=store)
    app.watched_path = path
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            status = app.query_one(StatusBar)
            await wait_for(pilot, lambda: "RUNNING" in text_of(status), what="running")
            await pilot.pause(1.5)
            assert "RUNNING" in text_of(status)  # quiet, but its writer holds the lock
            proc.kill()
            proc.wait()
            await wait_for(pilot, lambda: "CRASHED" in text_of(status), timeout=10)
            banner = text_of(app.query_one(Banner))
            assert "process is gone" in banner and "--resume auto" in banner
            summary = summarize(store.snapshot(), path)
            assert summary.state == "crashed"
            # resumed: a new writer, a new header (after the old run's end) and records
            proc = holder(tmp_path)
            write(path, [{"type": "end", "status": "stopped", "reason": "x", "step": 40}])
            await wait_for(pilot, lambda: "STOPPED" in text_of(status), timeout=10)
            write(path, recs[:3])
            await wait_for(pilot, lambda: "RUNNING" in text_of(status), timeout=10)
            assert not app.query_one(Banner).display
    finally:
        follower.stop()
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("kind", KINDS)
def test_watch_refuses_a_special_metrics_file_in_a_run_dir_at_once(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "config.toml").write_text("")
    KINDS[kind](tmp_path / "metrics.jsonl")
    started = time.monotonic()
    with pytest.raises(WatchError, match="metrics.jsonl"):
        check_target(str(tmp_path), strict=False)
    follower = JsonlFollower(tmp_path / "metrics.jsonl", MetricStore())
    assert follower.poll() == 0  # a special file planted later is skipped, not opened
    assert time.monotonic() - started < 5
    if kind == "fifo":
        os.unlink(tmp_path / "metrics.jsonl")


def test_a_lock_written_on_another_host_is_not_judged_here(tmp_path: Path) -> None:
    """On a shared filesystem a lock taken on another node may not show here: a run dir whose
    writer was on another host is left to the silence rule, never called crashed."""
    (tmp_path / LOCK_NAME).write_text("4242 some-other-node")
    assert not writer_gone(tmp_path)
    (tmp_path / LOCK_NAME).write_text(f"4242 {socket.gethostname()}")
    assert writer_gone(tmp_path)


def run_dir_in(tmp_path: Path, name: str, recs: list[dict], quiet_s: float) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    write(run_dir / "metrics.jsonl", recs)
    then = time.time() - quiet_s
    os.utime(run_dir / "metrics.jsonl", (then, then))
    return run_dir


def states(run_dir: Path) -> tuple[str, str, str]:
    """(the dashboard's in watch mode, `watch --compare`'s, `tuitrain runs`'s) state."""
    from tuitrain.rundir.summary import summarize_run

    path = run_dir / "metrics.jsonl"
    store = MetricStore()
    JsonlFollower(path, store).poll()
    app = TuitrainApp(store=store)
    app.watched_path = path
    summary = summarize_run(run_dir)
    assert summary is not None
    return app.frame().state, summarize(store.snapshot(), path).state, summary.status


def test_watch_compare_and_the_runs_table_agree_on_a_runs_state(tmp_path: Path) -> None:
    """One state rule (rundir.state.run_status): the same files read crashed, silent,
    running or completed in the dashboard's status bar, in compare's table and in `tuitrain
    runs`; paused is the viewers' own, over a running run (its newest pause or resume
    event says so, whatever events came after it)."""
    from tuitrain.rundir.lock import RunDirLock

    recs = [r for r in records("bf16", "cpu", steps=40) if r["type"] != "end"]
    day = 24 * 3600.0
    running = run_dir_in(tmp_path, "running", recs, 0)
    held = RunDirLock(running)  # a live writer holds its lock (another open file: a flock)
    pause = {"type": "event", "kind": "pause"}  # then a checkpoint saved while paused
    saved = {"type": "event", "kind": "checkpoint", "message": "saved"}
    paused = run_dir_in(tmp_path, "paused", [*recs, pause, saved], 5)
    held_too = RunDirLock(paused)
    try:
        crashed = run_dir_in(tmp_path, "crashed", recs, 5)
        (crashed / LOCK_NAME).write_text(f"4242 {socket.gethostname()}")  # nobody holds it
        silent = run_dir_in(tmp_path, "silent", recs, day)  # no lock file: nothing to tell
        dead_long_ago = run_dir_in(tmp_path, "dead", recs, day)
        (dead_long_ago / LOCK_NAME).write_text(f"4242 {socket.gethostname()}")
        end = {"type": "end", "status": "completed", "reason": "done", "step": 40}
        completed = run_dir_in(tmp_path, "completed", [*recs, end], day)
        (completed / LOCK_NAME).write_text(f"4242 {socket.gethostname()}")
        assert states(running) == ("running", "running", "running")
        assert states(crashed) == ("crashed", "crashed", "crashed")
        assert states(silent) == ("silent", "silent", "silent")
        assert states(dead_long_ago) == ("crashed", "crashed", "crashed")
        assert states(completed) == ("completed", "completed", "completed")
        assert states(paused) == ("paused", "paused", "running")
    finally:
        held.release()
        held_too.release()
