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
from tuitrain.metrics.follow import JsonlFollower
from tuitrain.metrics.store import MetricStore
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
    from tuitrain.ui.view import SILENT_FLOOR_S, silence

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
