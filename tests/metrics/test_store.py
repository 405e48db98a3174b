"""Tests for tuitrain.metrics.store: boundedness, snapshots, threads, decimation."""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tuitrain.metrics import MetricStore, Series, Snapshot
from tuitrain.metrics.store import HISTORY_CAPACITY, RING_SIZE


def train(step: int, **fields: object) -> dict[str, object]:
    return {"type": "train", "step": step, **fields}


@pytest.mark.slow
def test_million_pushes_stay_bounded_and_cover_the_run() -> None:
    store = MetricStore()
    rec = {"type": "train", "step": 0, "loss": 0.0, "lr": 1e-3, "grad_scale": None}
    n = 1_000_000
    t0 = time.perf_counter()
    for i in range(n):
        rec["step"] = i
        rec["loss"] = 1.0 / (i + 1)
        store.push(rec)
    elapsed = time.perf_counter() - t0
    # O(1) push: ~1-2 s on a laptop; a per-push copy of a series would take hours.
    assert elapsed < 20, f"1M pushes took {elapsed:.1f}s"

    snap = store.snapshot()
    assert snap.version == n
    assert set(snap.series) == {"loss", "lr"}
    loss = snap.series["loss"]
    assert len(loss) <= RING_SIZE + HISTORY_CAPACITY
    assert len(loss) > HISTORY_CAPACITY // 2
    # First and last steps are both kept; the old part is evenly thinned out.
    assert loss.xs[0] == 0
    assert loss.xs[-1] == n - 1
    gaps = [b - a for a, b in zip(loss.xs, loss.xs[1:], strict=False)]
    assert min(gaps) >= 1
    assert max(gaps) <= 4 * n / HISTORY_CAPACITY
    # The most recent RING_SIZE steps are all there.
    assert loss.xs[-RING_SIZE:] == tuple(float(s) for s in range(n - RING_SIZE, n))
    assert loss.ys[-1] == pytest.approx(1.0 / n)


def test_series_merge_sorted_without_duplicates_latest_value_wins() -> None:
    store = MetricStore(ring_size=4, history_capacity=8)
    for step in range(50):
        store.push(train(step, loss=float(step)))
    store.push(train(49, loss=-1.0))  # same step again (e.g. a resumed run)
    loss = store.snapshot().series["loss"]
    assert list(loss.xs) == sorted(set(loss.xs))
    assert len(loss) <= 4 + 8
    assert loss.xs[0] == 0 and loss.xs[-1] == 49
    assert loss.ys[-1] == -1.0


def test_none_bool_and_non_numeric_fields_are_skipped() -> None:
    store = MetricStore()
    store.push(train(1, loss=0.5, grad_scale=None, mem_alloc_bytes=None, note="x", flag=True))
    store.push(train(2, loss=0.4, grad_scale=None, mem_alloc_bytes=1024))
    store.push({"type": "train", "step": None, "loss": 9.0})  # no x: no points
    snap = store.snapshot()
    assert set(snap.series) == {"loss", "mem_alloc_bytes"}
    assert snap.series["loss"].xs == (1.0, 2.0)
    assert snap.series["mem_alloc_bytes"].xs == (2.0,)
    assert "step" not in snap.series
    assert snap.latest is not None and snap.latest["loss"] == 9.0


def test_record_kinds_are_kept_and_bounded() -> None:
    store = MetricStore()
    store.push({"type": "header", "preset": "a", "config": {"lr": 1}})
    store.push({"type": "header", "preset": "b", "config": {"lr": 2}})
    for i in range(1200):
        store.push({"type": "eval", "step": i, "epoch": i, "val_loss": 1.0, "val_acc": None})
    for i in range(600):
        store.push({"type": "event", "level": "info", "message": f"m{i}"})
    store.push({"type": "end", "status": "completed", "reason": "done", "step": 1199})
    store.push({"type": "mystery"})
    snap = store.snapshot()
    assert snap.header is not None and snap.header["preset"] == "b"
    assert len(snap.evals) == 1000 and snap.evals[-1]["step"] == 1199
    assert snap.last_eval is not None and snap.last_eval["step"] == 1199
    assert len(snap.events) == 500 and snap.events[0]["message"] == "m100"
    assert snap.end is not None and snap.end["status"] == "completed"
    assert set(snap.series) == {"val_loss"}  # val_acc was always None
    assert snap.latest is None
    assert snap.version == 2 + 1200 + 600 + 2


def test_snapshot_is_immutable_and_isolated() -> None:
    store = MetricStore()
    rec = train(1, loss=0.5, lr=0.1)
    original = dict(rec)
    store.push(rec)
    assert rec == original  # caller's dict untouched
    rec["loss"] = 123.0  # caller mutates after push: store unaffected
    snap = store.snapshot()
    assert snap.latest is not None and snap.latest["loss"] == 0.5

    store.push(train(2, loss=0.25, lr=0.1))
    store.push({"type": "event", "level": "info", "message": "later"})
    assert snap.series["loss"].xs == (1.0,)
    assert snap.latest["step"] == 1
    assert snap.events == ()
    with pytest.raises(TypeError):
        snap.latest["loss"] = 0.0  # type: ignore[index]
    with pytest.raises(TypeError):
        snap.series["x"] = Series()  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.version = 99  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.series["loss"].xs = ()  # type: ignore[misc]
    assert isinstance(snap.series["loss"].xs, tuple)


def test_snapshot_reuses_unchanged_series_and_unchanged_snapshots() -> None:
    store = MetricStore()
    store.push(train(1, loss=0.5, lr=0.1))
    s1 = store.snapshot()
    assert store.snapshot() is s1  # nothing pushed: same object
    store.push({"type": "eval", "step": 1, "val_loss": 0.4, "val_acc": 0.9})
    s2 = store.snapshot()
    assert s2 is not s1 and s2.version == s1.version + 1
    assert s2.series["loss"] is s1.series["loss"]  # untouched series: cached
    assert s2.series["val_acc"].ys == (0.9,)


def test_reset_clears_everything_and_bumps_version() -> None:
    store = MetricStore()
    store.push({"type": "header", "preset": "a"})
    store.push(train(1, loss=0.5))
    store.push({"type": "eval", "step": 1, "val_loss": 0.4, "val_acc": 0.9})
    store.push({"type": "event", "level": "info", "message": "hi"})
    store.push({"type": "end", "status": "stopped"})
    before = store.snapshot()
    store.reset()
    assert store.version == before.version + 1
    snap = store.snapshot()
    assert snap.version == before.version + 1
    assert snap.header is None and snap.latest is None and snap.last_eval is None
    assert snap.end is None and snap.evals == () and snap.events == ()
    assert dict(snap.series) == {}
    store.push(train(1, loss=2.0))
    assert store.snapshot().series["loss"].ys == (2.0,)
    assert before.series["loss"].ys == (0.5,)


def test_concurrent_push_and_snapshot() -> None:
    store = MetricStore(ring_size=64, history_capacity=128)
    n = 100_000
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(n):
                store.push(train(i, loss=float(i), lr=0.1))
                if i % 10_000 == 0:
                    store.push({"type": "event", "level": "info", "message": str(i)})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    versions = []
    snapshots = 0
    while thread.is_alive() or snapshots < 3:
        snap = store.snapshot()
        versions.append(snap.version)
        snapshots += 1
        for series in snap.series.values():
            assert len(series.xs) == len(series.ys)
            assert all(a < b for a, b in zip(series.xs, series.xs[1:], strict=False))
        if snap.latest is not None:
            assert snap.series["loss"].xs[-1] <= snap.latest["step"]
    thread.join()
    assert not errors
    assert versions == sorted(versions)
    final = store.snapshot()
    assert final.version == n + 10
    assert final.series["loss"].xs[-1] == n - 1
    assert snapshots > 3


def test_decimate_keeps_extremes_in_x_order() -> None:
    rng = random.Random(0)
    xs = tuple(float(i) for i in range(5000))
    ys = [rng.uniform(-1, 1) for _ in xs]
    ys[1234] = 50.0
    ys[4321] = -70.0
    ys[7] = float("nan")
    series = Series(xs=xs, ys=tuple(ys))
    dx, dy = series.decimate(80)
    assert len(dx) == len(dy) <= 160
    assert len(dx) > 80
    assert dx == sorted(dx)
    assert 50.0 in dy and -70.0 in dy
    assert dx[dy.index(50.0)] == 1234.0
    width = 5000 / 80  # the first and the last bucket are both represented
    assert dx[0] < width and dx[-1] >= 5000 - width
    assert all(math.isfinite(y) for y in dy)


def test_decimate_small_series_and_bad_buckets() -> None:
    series = Series(xs=(1.0, 2.0, 3.0), ys=(3.0, float("inf"), 1.0))
    assert series.decimate(10) == ([1.0, 3.0], [3.0, 1.0])
    assert Series().decimate(5) == ([], [])
    assert Series().last is None and series.last == 1.0
    with pytest.raises(ValueError):
        series.decimate(0)


def test_snapshot_defaults() -> None:
    snap = Snapshot()
    assert snap.version == 0 and dict(snap.series) == {}
    assert snap.get("loss") == Series()


def test_metrics_package_is_pure_stdlib() -> None:
    code = (
        "import sys, tuitrain.metrics\n"
        "bad = [m for m in ('torch', 'textual', 'rich') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_new_run_in_the_same_file_starts_afresh_a_resumed_one_does_not() -> None:
    """A header without `history` after another run's records is a new run (started without
    --resume in a used run dir): the store shows it alone, as the summary counts it. A header
    with `history` is the same run resumed: its earlier points stay."""
    store = MetricStore()
    store.push({"type": "header", "preset": "a"})
    for step in (1, 2, 3):
        store.push(train(step, loss=9.0))
    store.push({"type": "event", "level": "info", "message": "the first run's"})
    store.push({"type": "end", "status": "completed", "reason": "", "step": 3})
    store.push({"type": "header", "preset": "b"})  # no history: another run
    store.push(train(1, loss=1.0))
    snap = store.snapshot()
    assert snap.header is not None and snap.header["preset"] == "b"
    assert list(snap.series["loss"].ys) == [1.0] and snap.events == () and snap.end is None
    store.push({"type": "header", "preset": "b", "history": {"segments": 1, "step": 1}})
    store.push(train(2, loss=0.5))
    assert list(store.snapshot().series["loss"].ys) == [1.0, 0.5]  # resumed: one curve
