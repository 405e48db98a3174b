"""JsonlFollower: replay, follow a growing file, torn lines, replaced files, long files."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from tuitrain.metrics import MetricStore
from tuitrain.rundir.follow import JsonlFollower, resolve_metrics_path


def line(rec: dict) -> str:
    return json.dumps(rec) + "\n"


def train(step: int) -> dict:
    return {"type": "train", "step": step, "loss": 1.0 / step, "samples_per_s": 100.0}


def test_follows_a_file_written_by_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    store = MetricStore()
    follower = JsonlFollower(path, store, poll_s=0.02)
    follower.start()

    def write() -> None:
        with open(path, "a") as f:
            f.write(line({"type": "header", "preset": "p"}))
            for step in range(1, 51):
                f.write(line(train(step)))
                f.flush()
                time.sleep(0.002)
            f.write(line({"type": "end", "status": "completed", "step": 50}))

    writer = threading.Thread(target=write)
    writer.start()
    writer.join()
    deadline = time.monotonic() + 5
    while store.snapshot().end is None and time.monotonic() < deadline:
        time.sleep(0.02)
    follower.stop()
    snap = store.snapshot()
    assert snap.header["preset"] == "p" and snap.end["status"] == "completed"
    assert snap.get("loss").xs == tuple(range(1, 51))


def test_a_torn_line_waits_for_its_end_or_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    store = MetricStore()
    follower = JsonlFollower(path, store)
    half = line(train(2))[:20]
    path.write_text(line(train(1)) + half)
    assert follower.poll() == 1
    with open(path, "a") as f:  # the writer finishes the line
        f.write(line(train(2))[20:])
    assert follower.poll() == 1
    # a run killed mid-write, then resumed: the torn line is garbage and skipped
    with open(path, "a") as f:
        f.write('{"type": "train", "st' + line(train(3)) + line({"type": "mystery", "x": 1}))
    follower.poll()
    assert store.snapshot().get("loss").xs == (1, 2)  # the garbled line 3 is skipped
    assert store.snapshot().latest["step"] == 2


def test_a_replaced_file_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    store = MetricStore()
    follower = JsonlFollower(path, store)
    path.write_text(line({"type": "header", "preset": "old"}) + line(train(1)) + line(train(2)))
    follower.poll()
    new = tmp_path / "new.jsonl"
    new.write_text(line({"type": "header", "preset": "new"}) + line(train(7)))
    os.replace(new, path)  # a new run writes the same path
    follower.poll()
    snap = store.snapshot()
    assert snap.header["preset"] == "new" and snap.get("loss").xs == (7,)
    assert follower.restarts == 1


def test_a_long_file_is_read_bounded(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    n = 100_000
    with open(path, "w") as f:
        f.write(line({"type": "header", "preset": "long"}))
        for step in range(1, n + 1):
            f.write(line(train(step)))
            if step % 10_000 == 0:
                f.write(line({"type": "eval", "step": step, "val_loss": 0.5, "val_acc": 0.8}))
    store = MetricStore()
    follower = JsonlFollower(path, store)
    follower.poll()
    snap = store.snapshot()
    loss = snap.get("loss")
    assert len(loss) < 5_000  # bounded, whatever the file length
    assert loss.xs[-500:] == tuple(range(n - 499, n + 1))  # every recent step is there
    assert loss.xs[0] <= n // 1000  # and the history reaches back to the start
    assert len(snap.evals) == 10  # no eval is dropped by the striding


def test_resolve_metrics_path(tmp_path: Path) -> None:
    assert resolve_metrics_path(tmp_path) == tmp_path / "metrics.jsonl"
    assert resolve_metrics_path(tmp_path / "x.jsonl") == tmp_path / "x.jsonl"


def test_chunked_reads_keep_lines_whole(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Reads in chunks far smaller than the file (lines cut at every boundary) give the
    store what one read gives: the catch-up, then a live append."""
    monkeypatch.setattr("tuitrain.rundir.follow.CHUNK_BYTES", 97)
    monkeypatch.setattr("tuitrain.rundir.follow.CATCHUP_TRAIN_POINTS", 64)
    monkeypatch.setattr("tuitrain.rundir.follow.CATCHUP_TAIL", 16)
    path = tmp_path / "metrics.jsonl"
    recs = [{"type": "header", "preset": "chunks"}]
    for step in range(1, 1001):
        recs.append(train(step))
        if step % 100 == 0:
            recs.append({"type": "eval", "step": step, "val_loss": 0.5, "val_acc": step / 1e4})
    path.write_text("".join(line(r) for r in recs))
    store = MetricStore()
    follower = JsonlFollower(path, store)
    pushed = follower.poll()
    snap = store.snapshot()
    xs = snap.get("loss").xs
    assert snap.header["preset"] == "chunks" and len(snap.evals) == 10
    assert xs[-16:] == tuple(range(985, 1001))  # the tail, whole
    assert 32 <= len(xs) - 16 <= 64 and xs[0] == 1  # a strided history from the start
    gaps = sorted(b - a for a, b in zip(xs, xs[1:-16], strict=False))
    assert gaps[-1] <= 1.25 * gaps[len(gaps) // 2]  # evenly spread (by bytes: about by step)
    assert pushed == 1 + 10 + len(xs)
    with open(path, "a") as f:  # live lines after the catch-up: every one is taken
        f.write("".join(line(train(s)) for s in range(1001, 1051)))
    assert follower.poll() == 50
    assert store.snapshot().get("loss").xs[-50:] == tuple(range(1001, 1051))


def test_catch_up_keeps_what_a_full_replay_keeps(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Thinning train lines and old events changes nothing the store keeps but the density
    of the train history: header, end, evals, the newest events, the latest record, the
    val series and the recent train points are those of pushing every record in order."""
    monkeypatch.setattr("tuitrain.rundir.follow.CATCHUP_TRAIN_POINTS", 256)
    recs: list[dict] = [{"type": "header", "preset": "full"}]
    for step in range(1, 3001):
        recs.append(train(step))
        if step % 60 == 0:
            recs.append({"type": "eval", "step": step, "val_loss": 1 / step, "val_acc": step / 4e3})
        if step % 4 == 0:  # 750 events: more than the store keeps
            recs.append({"type": "event", "level": "info", "message": f"at {step}", "step": step})
    recs.append({"type": "end", "status": "completed", "step": 3000})
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(line(r) for r in recs))
    caught_up, replayed = MetricStore(), MetricStore()
    JsonlFollower(path, caught_up).poll()
    for rec in recs:
        replayed.push(rec)
    a, b = caught_up.snapshot(), replayed.snapshot()
    assert (a.header, a.end, a.latest, a.last_eval) == (b.header, b.end, b.latest, b.last_eval)
    assert [dict(e) for e in a.evals] == [dict(e) for e in b.evals] and len(a.evals) == 50
    assert [dict(e) for e in a.events] == [dict(e) for e in b.events]
    assert len(a.events) == caught_up.max_events == 500
    assert a.get("val_acc") == b.get("val_acc")
    assert a.get("loss").xs[-512:] == b.get("loss").xs[-512:]
    assert len(a.get("loss")) < len(b.get("loss"))  # the older history was thinned


def test_opening_a_file_that_holds_two_runs_shows_the_last_run_alone(tmp_path: Path) -> None:
    """A run started again in a used run dir without --resume appends a header without
    `history`: opening the file (the catch-up, which pushes train lines and events after the
    other records) shows that run alone, as reading it line by line does and as the summary
    counts it; a resumed segment (its header has `history`) stays part of the curve."""
    path = tmp_path / "metrics.jsonl"
    first = [{"type": "header", "preset": "a"}]
    first += [{"type": "train", "step": s, "loss": 9.0} for s in range(1, 6001)]
    first += [{"type": "event", "level": "info", "message": "the first run's"}]
    first += [{"type": "eval", "step": 6000, "val_loss": 9.0}]
    first += [{"type": "end", "status": "completed", "reason": "", "step": 6000}]
    second = [{"type": "header", "preset": "b"}]
    second += [{"type": "train", "step": s, "loss": 1.0} for s in range(1, 101)]
    second += [{"type": "event", "level": "info", "message": "the second run's"}]
    resumed = [{"type": "header", "preset": "b", "history": {"segments": 1, "step": 100}}]
    resumed += [{"type": "train", "step": s, "loss": 0.5} for s in range(101, 201)]
    path.write_text("".join(line(r) for r in first + second + resumed))
    opened = MetricStore()
    JsonlFollower(path, opened).poll()
    in_order = MetricStore()
    for rec in first + second + resumed:
        in_order.push(rec)
    for store in (opened, in_order):
        snap = store.snapshot()
        assert snap.header is not None and snap.header["preset"] == "b"
        assert set(snap.series["loss"].ys) == {1.0, 0.5}, store
        assert list(snap.series["loss"].xs) == list(range(1, 201))
        assert [e["message"] for e in snap.events] == ["the second run's"]
        assert "val_loss" not in snap.series and snap.end is None
