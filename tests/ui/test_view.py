"""The panels' arithmetic, without an app: ETA, smoothing, verdicts, failure, ticks."""

from __future__ import annotations

import math

import pytest

from tests.ui.fake_records import filled_store
from tuitrain.metrics.format import format_duration
from tuitrain.metrics.records import data_wait_verdict, end_record, header_record
from tuitrain.metrics.store import MetricStore, Series
from tuitrain.ui.view import (
    display_state,
    failure,
    last_overflow_step,
    no_scaler_reason,
    progress,
    progress_bar,
    smooth,
)
from tuitrain.ui.widgets.chart import format_tick, nice_ticks


def test_format_duration() -> None:
    assert format_duration(75) == "1:15"
    assert format_duration(3725) == "1:02:05"
    assert format_duration(None) == "—"
    assert format_duration(float("nan")) == "—"


def test_smooth_is_debiased_and_skips_nan() -> None:
    assert smooth([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    out = smooth([1.0, float("nan"), 3.0], weight=0.5)
    assert out[0] == pytest.approx(1.0) and math.isnan(out[1])
    assert 1.0 < out[2] < 3.0


def test_progress_and_eta_from_recent_step_times() -> None:
    snap = filled_store(steps=400).snapshot()
    prog = progress(snap)
    assert (prog.step, prog.total_steps, prog.epochs) == (400, 600, 3)
    assert prog.fraction == pytest.approx(400 / 600)
    assert prog.eta_s == pytest.approx(200 * 256 / 41000)


def test_progress_bar_width() -> None:
    for frac in (0.0, 0.33, 0.5, 1.0, None):
        assert len(progress_bar(frac, 20)) == 20
    assert progress_bar(1.0, 4) == "████"


def test_state_falls_back_to_records() -> None:
    store = MetricStore()
    assert display_state(store.snapshot(), None) == "starting"
    store.push(header_record(preset="x"))
    assert display_state(store.snapshot(), None) == "running"
    assert display_state(store.snapshot(), "running", pausing=True) == "pausing"
    assert display_state(store.snapshot(), "evaluating") == "evaluating"
    store.push(end_record("failed", "", 0))
    assert display_state(store.snapshot(), None) == "failed"


def test_failure_strips_the_hint_from_the_message() -> None:
    store = MetricStore()
    store.push(
        {
            "type": "event",
            "level": "error",
            "kind": "failed",
            "message": "boom (try less)",
            "hint": "try less",
            "traceback": "Traceback...",
        }
    )
    fail = failure(store.snapshot())
    assert fail is not None
    assert (fail.message, fail.hint, fail.traceback) == ("boom", "try less", "Traceback...")
    assert failure(MetricStore().snapshot()) is None


def test_last_overflow_step() -> None:
    assert last_overflow_step(Series((2, 4, 6, 8), (0, 1, 1, 2))) == 8
    assert last_overflow_step(Series((2, 4), (0, 0))) is None


def test_no_scaler_reasons() -> None:
    assert "bf16" in (no_scaler_reason("bf16") or "")
    assert "fp32" in (no_scaler_reason("fp32") or "")
    assert no_scaler_reason("fp16") is None


@pytest.mark.parametrize(
    ("frac", "loader", "verdict", "hint_has"),
    [
        (0.05, "dataloader", "ok", ""),
        (0.15, "dataloader", "warning", "num_workers"),
        (0.35, "dataloader", "input-bound", "data.loader='device'"),
        (0.35, "device", "input-bound", "already lives on the device"),
        (None, "device", "unknown", ""),
    ],
)
def test_data_wait_verdict(frac: float | None, loader: str, verdict: str, hint_has: str) -> None:
    data = {"loader": loader, "num_workers": 2, "pin_memory": False}
    got_verdict, hint = data_wait_verdict(frac, data, "cuda:0")
    assert got_verdict == verdict
    assert hint_has in hint
    if verdict == "ok":
        assert hint == ""


def test_ticks_are_round_and_readable() -> None:
    assert nice_ticks(2, 400, 4) == [100, 200, 300, 400]
    assert nice_ticks(0.31, 2.2, 4) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert [format_tick(t) for t in (0, 0.25, 3.0, 1500, 41000)] == [
        "0",
        "0.25",
        "3",
        "1.5k",
        "41k",
    ]


def test_a_watched_runs_sign_of_life_is_its_newest_progress_past_the_latest_step() -> None:
    from tuitrain.metrics.records import event_record
    from tuitrain.ui.view import progress_after_latest

    store = MetricStore()
    store.push(header_record(preset="x"))
    assert progress_after_latest(store.snapshot()) == (None, None)
    store.push(event_record("step 3/9", kind="progress", step=3, step_time_s=7.5))
    assert progress_after_latest(store.snapshot()) == (3, 7.5)
    store.push(event_record("step 5/9", kind="progress", step=5, step_time_s=0.0))
    assert progress_after_latest(store.snapshot()) == (5, None)  # no rate it can show
    store.push({"type": "train", "step": 6, "epoch": 0.5, "samples": 6, "loss": 1.0})
    assert progress_after_latest(store.snapshot()) == (None, None)  # the log point caught up
