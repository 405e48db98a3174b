"""`tuitrain watch`: the dashboard fed by a metrics.jsonl that grows, tears and is replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.ui.fake_records import header, records
from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.ui.app import TuitrainApp
from tuitrain.ui.widgets.status import StatusBar

pytestmark = pytest.mark.timeout(120)


def write_lines(path: Path, recs: list[dict], delay: float = 0.0) -> None:
    with open(path, "a") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            if delay:
                time.sleep(delay)


async def test_watch_follows_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    recs = [r for r in records("bf16", "cpu", steps=120) if r["type"] != "end"]
    store = MetricStore()
    follower = JsonlFollower(path, store, poll_s=0.05)
    follower.start()
    writer = threading.Thread(target=write_lines, args=(path, recs, 0.005))
    app = TuitrainApp(store=store)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            writer.start()
            status = app.query_one(StatusBar)
            await wait_for(pilot, lambda: "fashion-bf16" in text_of(status), what="the header")
            last = max(r["step"] for r in recs if r["type"] == "train")
            await wait_for(
                pilot,
                lambda: (store.snapshot().latest or {}).get("step") == last,
                what="the last train record",
            )
            await wait_for(pilot, lambda: str(last) in text_of(status), what="the last step")
            await pilot.press("space")  # needs a live engine: a hint, no crash
            await pilot.press("q")
    finally:
        writer.join()
        follower.stop()


async def test_watch_survives_a_torn_line_and_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, [header("fp16", "cuda")])
    with open(path, "a") as f:
        f.write('{"type": "train", "step": 3, "lo')  # a run killed mid-write
    store = MetricStore()
    follower = JsonlFollower(path, store, poll_s=0.05)
    follower.poll()
    app = TuitrainApp(store=store)
    follower.start()
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            status = app.query_one(StatusBar)
            await wait_for(pilot, lambda: "fashion-fp16" in text_of(status), what="old header")
            assert store.snapshot().latest is None  # the torn record was not taken
            new = tmp_path / "new.jsonl"
            write_lines(new, [header("bf16", "cpu")])
            os.replace(new, path)  # a new run takes the file
            await wait_for(pilot, lambda: "fashion-bf16" in text_of(status), what="new header")
            await pilot.press("q")
    finally:
        follower.stop()


def test_watch_command_refuses_a_missing_dir(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "watch", str(tmp_path / "no" / "such" / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "is not a run dir" in proc.stderr


async def test_a_long_event_history_shows_its_newest_part(tmp_path: Path) -> None:
    """Opening a run with thousands of events writes the newest MAX_BURST and says how many
    came before (writing each one costs the UI thread ~0.4 ms)."""
    from tuitrain.ui.widgets.events import MAX_BURST, EventLog

    path = tmp_path / "metrics.jsonl"
    events = [
        {"type": "event", "level": "info", "message": f"note number {i}", "step": i}
        for i in range(450)
    ]
    write_lines(path, [header("bf16", "cpu"), *events])
    store = MetricStore()
    JsonlFollower(path, store).poll()
    kept = len(store.snapshot().events)
    app = TuitrainApp(store=store)
    async with app.run_test(size=(120, 36)) as pilot:
        log = app.query_one(EventLog)
        await wait_for(pilot, lambda: len(log.lines) > 0, what="the event log")
        text = "\n".join(line.text for line in log.lines)
        assert f"… {kept - MAX_BURST:,} earlier events" in text
        assert "note number 449" in text and f"note number {450 - MAX_BURST - 1}" not in text
        assert len(log.lines) < MAX_BURST + 10
        await pilot.press("q")


async def test_a_run_that_went_silent_without_an_end_is_flagged(tmp_path: Path) -> None:
    """A run killed with -9 writes no end record: after far longer than its log interval
    without a new line, watch says so instead of showing RUNNING forever."""
    from tuitrain.ui.widgets.banner import Banner

    path = tmp_path / "metrics.jsonl"
    write_lines(path, [r for r in records("bf16", "cpu", steps=40) if r["type"] != "end"])
    store = MetricStore()
    JsonlFollower(path, store).poll()
    app = TuitrainApp(store=store)
    app.watched_path = path
    async with app.run_test(size=(120, 36)) as pilot:
        status = app.query_one(StatusBar)
        await wait_for(pilot, lambda: "RUNNING" in text_of(status), what="a live-looking run")
        old = time.time() - 600
        os.utime(path, (old, old))  # ten minutes without a line
        await wait_for(pilot, lambda: "SILENT" in text_of(status), what="the silent badge")
        banner = text_of(app.query_one(Banner))
        assert "no new record for 10:0" in banner and "may have died" in banner
        os.utime(path)  # it writes again
        await wait_for(pilot, lambda: "RUNNING" in text_of(status), what="running again")
        assert not app.query_one(Banner).display
        await pilot.press("q")


def test_silence_scales_with_the_log_interval() -> None:
    from tuitrain.rundir.state import SILENT_FLOOR_S
    from tuitrain.ui.view import silence

    store = MetricStore()
    for rec in records("bf16", "cpu", steps=40):
        if rec["type"] != "end":
            store.push(rec)
    snap = store.snapshot()
    assert silence(snap, SILENT_FLOOR_S - 1) is None
    assert silence(snap, None) is None  # not watching a file
    slow = {**snap.latest, "step_time_s": 60.0}  # 60 s steps: silence is relative to them
    store.push(slow)
    log_every = snap.header["config"]["train"]["log_every"]
    assert silence(store.snapshot(), SILENT_FLOOR_S + 1) is None
    assert silence(store.snapshot(), 11 * 60.0 * log_every) is not None
    store.push({"type": "end", "status": "completed", "step": slow["step"]})
    assert silence(store.snapshot(), 10**6) is None  # ended runs are never silent


def test_event_log_order_from_a_file(tmp_path: Path) -> None:
    """`watch` reads records without the dashboard's arrival stamps: the event log still
    lists them as they happened (by step, an epoch's evaluation before its checkpoint)."""
    from tuitrain.ui.widgets.events import ordered_records

    def event(message: str, **extra: object) -> dict:
        return {"type": "event", "level": "info", "message": message, **extra}

    lines = [
        header("bf16", "cpu", total_steps=46),
        event("fp16 is emulated here"),  # no step: before everything else
        *[r for r in records("bf16", "cpu", steps=23) if r["type"] == "train"],
        {"type": "eval", "step": 23, "epoch": 1.0, "val_loss": 0.5, "val_acc": 0.8},
        event("checkpoint 23", step=23, kind="checkpoint"),
        event("straggler", step=40),
        event("no step: after the straggler"),
        {"type": "eval", "step": 46, "epoch": 2.0, "val_loss": 0.4, "val_acc": 0.85},
        event("checkpoint 46", step=46, kind="checkpoint"),
    ]
    path = tmp_path / "metrics.jsonl"
    write_lines(path, lines)
    store = MetricStore()
    JsonlFollower(path, store).poll()
    order = [r.get("message") or f"eval {r['step']}" for r in ordered_records(store.snapshot())]
    assert order == [
        "fp16 is emulated here",
        "eval 23",
        "checkpoint 23",
        "straggler",
        "no step: after the straggler",
        "eval 46",
        "checkpoint 46",
    ]


def watch_cmd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_DRIVER"}
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "watch", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=timeout,
    )


def test_watch_without_a_terminal_refuses_at_once(tmp_path: Path) -> None:
    """No TTY and no TEXTUAL_DRIVER: a viewer has nothing to fall back to, so one sentence and
    exit 2, instead of escape codes into a pipe and a wait for keys that never come."""
    write_lines(tmp_path / "metrics.jsonl", [header("bf16", "cpu")])
    for args in ([str(tmp_path)], ["--compare", str(tmp_path), str(tmp_path)]):
        proc = watch_cmd(*args, timeout=30)
        assert proc.returncode == 2
        assert proc.stdout == "" and "\x1b" not in proc.stderr
        assert proc.stderr.count("\n") == 1 and "needs a terminal" in proc.stderr
        assert "textual serve" in proc.stderr and "Traceback" not in proc.stderr


def test_watch_in_a_terminal_draws_and_quits_on_q(tmp_path: Path) -> None:
    """The terminal check lets a real (pseudo-)terminal through."""
    import pty
    import select

    write_lines(tmp_path / "metrics.jsonl", records("bf16", "cpu", steps=20))
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_DRIVER"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "watch", str(tmp_path)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**env, "COLUMNS": "100", "LINES": "30"},
        start_new_session=True,
    )
    os.close(follower)
    screen = b""

    def read_for(seconds: float, until: bytes | None = None) -> None:
        nonlocal screen
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until in screen):
            if select.select([leader], [], [], 0.1)[0]:
                try:
                    screen += os.read(leader, 65536)
                except OSError:  # the viewer exited and closed the terminal
                    return

    try:
        read_for(60, until=b"Throughput")
        assert b"Throughput" in screen and b"needs a terminal" not in screen
        os.write(leader, b"q")
        read_for(10)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)


@pytest.mark.parametrize("name", ["f", "notes.txt"])
def test_watch_refuses_an_empty_file_not_named_jsonl(tmp_path: Path, name: str) -> None:
    """`watch FILE` on a plain file without a suffix used to look for FILE/metrics.jsonl and
    die with NotADirectoryError; an empty file is only waited on when it is named .jsonl."""
    (tmp_path / name).touch()
    proc = watch_cmd(str(tmp_path / name))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"tuitrain watch: error: {tmp_path / name} is an empty file, not a metrics file; "
        "pass a run dir, or the metrics.jsonl in it.\n"
    )


def test_watch_refuses_a_file_without_suffix_that_holds_no_records(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("hello\n")
    proc = watch_cmd(str(tmp_path / "notes"))
    assert proc.returncode == 2
    assert "is not a tuitrain metrics file" in proc.stderr and "Traceback" not in proc.stderr


def test_watch_refuses_a_pipe_or_a_device(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target, kind in ((fifo, "pipe"), (Path("/dev/null"), "device")):
        proc = watch_cmd(str(target), timeout=30)  # opening a fifo would block: never done
        assert proc.returncode == 2
        assert f"{target} is not a run dir or a metrics file (it is a {kind})" in proc.stderr


def test_check_target_takes_a_file_of_records_whatever_its_name(tmp_path: Path) -> None:
    from tuitrain.commands.watch import check_target

    for name in ("metrics", "run.log", "metrics.jsonl"):
        write_lines(tmp_path / name, [header("bf16", "cpu")])
        assert check_target(str(tmp_path / name), strict=False) == tmp_path / name
        assert check_target(str(tmp_path / name), strict=True) == tmp_path / name
    (tmp_path / "empty.jsonl").touch()  # a run's file just created: waited on
    assert check_target(str(tmp_path / "empty.jsonl"), strict=False) == tmp_path / "empty.jsonl"


@pytest.mark.parametrize("poll", ["-1", "0", "nan", "inf", "1e10", "soon"])
def test_watch_refuses_a_bad_poll(tmp_path: Path, poll: str) -> None:
    proc = watch_cmd("--poll", poll, str(tmp_path))
    assert proc.returncode == 2
    assert (
        f"argument --poll: {poll} is not a number of seconds above 0 and at most 3600; "
        "pass one like 0.25" in proc.stderr
    )
