"""The parity verdict's noise: exact McNemar p-value, paired 95% interval of the gap, and the
sentence when the verdict and the noise disagree. Pure arithmetic: no training here."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuitrain.metrics.parity_report import (
    EpochRow,
    PairedCounts,
    ParityResult,
    format_p,
    gap_ci95_points,
    mcnemar_exact_p,
    paired_diff_ci,
    wilson_interval,
)


def exact_mcnemar(b: int, c: int) -> float:
    """The definition, in exact rationals: min(1, 2 P[Binomial(b+c, 1/2) <= min(b, c)])."""
    m = b + c
    if m == 0:
        return 1.0
    tail = Fraction(sum(math.comb(m, k) for k in range(min(b, c) + 1)), 2**m)
    return float(min(Fraction(1), 2 * tail))


# --------------------------------------------------------------------------- McNemar


def test_mcnemar_known_values() -> None:
    # b=10, c=2: 2 * (1 + 12 + 66) / 4096 = 79 / 2048
    assert mcnemar_exact_p(10, 2) == pytest.approx(79 / 2048, rel=1e-12)
    assert round(mcnemar_exact_p(10, 2), 4) == 0.0386
    assert mcnemar_exact_p(2, 10) == mcnemar_exact_p(10, 2)  # two-sided: symmetric
    assert mcnemar_exact_p(0, 0) == 1.0  # no discordant image: no evidence at all
    assert mcnemar_exact_p(5, 5) == 1.0
    assert mcnemar_exact_p(0, 10) == pytest.approx(2 / 1024, rel=1e-12)
    assert mcnemar_exact_p(1, 0) == 1.0  # min(1, 2 * 1/2)


@pytest.mark.parametrize(
    "b,c", [(0, 1), (1, 1), (3, 1), (7, 0), (20, 8), (13, 40), (150, 110), (700, 640)]
)
def test_mcnemar_matches_the_exact_binomial_sum(b: int, c: int) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(exact_mcnemar(b, c), rel=1e-9)


def test_mcnemar_with_millions_of_discordant_pairs_is_the_normal_tail() -> None:
    b, c = 3_000_000, 3_001_000  # z = 1000 / sqrt(6,001,000) = 0.408: p close to erfc
    z = (c - b) / math.sqrt(b + c)
    assert mcnemar_exact_p(b, c) == pytest.approx(math.erfc(z / math.sqrt(2)), abs=2e-3)
    assert mcnemar_exact_p(5000, 4000) < 1e-20


def test_mcnemar_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 3)


# --------------------------------------------------------------------------- the interval


def test_wilson_interval_known_value() -> None:
    low, high = wilson_interval(81, 263)  # Newcombe 1998 (unpaired paper), example: 0.2553-0.3662
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)


def test_newcombe_paired_interval_matches_the_published_example() -> None:
    # Cavo et al. 2012 in Fagerland, Lydersen & Laake (the paired 2x2 table): 59, 6 / 16, 80
    # gives -0.0621 (95% CI -0.1186 to -0.0046) by Newcombe's square-and-add method
    low, high = paired_diff_ci(PairedCounts(both=59, fp32_only=6, mixed_only=16, neither=80))
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)


def test_no_discordant_image_is_a_narrow_interval_around_zero_not_a_point() -> None:
    ci = gap_ci95_points(PairedCounts(9000, 0, 0, 1000))
    assert ci[0] < 0 < ci[1] and ci[1] - ci[0] < 0.2
    assert gap_ci95_points(PairedCounts(9000, 0, 0, 1000), 0.0) == ci


@pytest.mark.parametrize(
    "counts",
    [
        PairedCounts(0, 0, 0, 1),  # one image, wrong in both
        PairedCounts(1, 0, 0, 0),  # one image, right in both
        PairedCounts(0, 1, 0, 0),  # n = 1, discordant
        PairedCounts(0, 3, 0, 0),  # all discordant, one way: gap +100
        PairedCounts(0, 0, 5, 0),  # all discordant, the other way: gap -100
        PairedCounts(0, 4, 4, 0),  # all discordant, balanced
        PairedCounts(990, 0, 10, 0),
        PairedCounts(8800, 37, 21, 1142),
        PairedCounts(2, 1, 0, 2),
    ],
)
def test_the_interval_holds_the_gap_and_stays_in_bounds(counts: PairedCounts) -> None:
    gap = 100 * (counts.fp32_only - counts.mixed_only) / counts.n
    low, high = gap_ci95_points(counts)
    assert -100 <= low <= gap <= high <= 100
    assert high - low > 0  # never a bare point: n images are only a sample


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3000), st.integers(0, 300), st.integers(0, 300), st.integers(0, 3000))
def test_the_interval_always_holds_the_gap(a: int, b: int, c: int, d: int) -> None:
    counts = PairedCounts(a, b, c, d)
    if counts.n == 0:
        return
    gap = round(100 * (b - c) / counts.n, 6)  # as ParityResult.gap_points rounds it
    low, high = gap_ci95_points(counts, gap)
    assert -100 <= low <= gap <= high <= 100
    assert 0 <= mcnemar_exact_p(b, c) <= 1


def test_more_images_narrow_the_interval() -> None:
    small = gap_ci95_points(PairedCounts(800, 20, 10, 170))
    large = gap_ci95_points(PairedCounts(8000, 200, 100, 1700))  # same proportions, 10x n
    assert large[1] - large[0] < (small[1] - small[0]) / 2


# --------------------------------------------------------------------------- the result


def result_with(fp32_right: int, mixed_right: int, counts: PairedCounts) -> ParityResult:
    n = counts.n
    r = ParityResult(preset="p", mixed="bf16", device="cpu", epochs=1, seed=0)
    r.per_epoch = [EpochRow(1, fp32_right / n, mixed_right / n, 0.5, 0.5)]
    r.test_set_size, r.paired = n, counts
    return r


def test_the_gap_sign_is_fp32_minus_mixed_and_sits_in_its_interval() -> None:
    counts = PairedCounts(both=800, fp32_only=12, mixed_only=2, neither=186)  # fp32 +10 images
    r = result_with(812, 802, counts)
    assert r.gap_points == pytest.approx(1.0)
    assert r.discordant == {"fp32_only": 12, "mixed_only": 2}
    assert r.p_value == pytest.approx(exact_mcnemar(12, 2))
    ci = r.gap_ci95_points
    assert ci is not None and ci[0] <= r.gap_points <= ci[1] and ci[0] > 0
    out = r.to_json()
    assert out["discordant"] == r.discordant and out["p_value"] == r.p_value
    assert out["gap_ci95_points"] == ci
    assert out["paired"] == {"both": 800, "fp32_only": 12, "mixed_only": 2, "neither": 186}


def test_a_fail_within_noise_says_so_and_how_to_settle_it() -> None:
    # 1,000 images, 6 vs 0 discordant: gap +0.6 (FAIL), but p = 0.031, CI reaches below 0.5
    r = result_with(806, 800, PairedCounts(800, 6, 0, 194))
    assert r.verdict == "FAIL"
    note = r.noise_note
    assert note is not None and note.startswith("FAIL, but the 95% interval of the gap [")
    assert "reaches back within 0.5 point" in note
    # 1,000 images, 10 vs 4: gap +0.6, the interval includes 0
    r = result_with(810, 804, PairedCounts(800, 10, 4, 186))
    assert r.verdict == "FAIL" and r.noise_note is not None
    assert r.noise_note.startswith("FAIL, but within noise: the 95% interval of the gap [")
    assert "includes 0 (p = 0.18)" in r.noise_note
    assert "more epochs" in r.noise_note and "data.val_samples=0" in r.noise_note
    assert "more seeds" in r.noise_note
    assert r.to_json()["noise_note"] == r.noise_note


def test_a_pass_whose_interval_reaches_past_the_threshold_says_so() -> None:
    r = result_with(803, 800, PairedCounts(790, 13, 10, 187))  # gap +0.3, wide interval
    assert r.verdict == "PASS"
    note = r.noise_note
    assert note is not None and note.startswith("PASS, but the 95% interval of the gap [")
    assert "reaches past 0.5 point" in note and "more seeds" in note


def test_verdicts_the_noise_agrees_with_say_nothing() -> None:
    # 10,000 images, fp32 better by 300: FAIL, far outside noise
    assert result_with(9300, 9000, PairedCounts(9000, 300, 0, 700)).noise_note is None
    # 10,000 images, 2 discordant: PASS with a tight interval
    r = result_with(9001, 9000, PairedCounts(9000, 1, 0, 999))
    assert r.verdict == "PASS" and r.noise_note is None
    assert r.gap_ci95_points is not None and max(map(abs, r.gap_ci95_points)) < 0.5


def test_no_pairing_means_no_noise_fields() -> None:
    r = result_with(9001, 9000, PairedCounts(9000, 1, 0, 999))
    r.paired = None
    out = r.to_json()
    assert out["discordant"] is None and out["p_value"] is None
    assert out["gap_ci95_points"] is None and out["noise_note"] is None
    assert "McNemar" not in r.summary()


def test_format_p() -> None:
    assert format_p(0.0385742) == "0.039" and format_p(1.0) == "1"
    assert format_p(3e-7) == "< 0.0001"


# --------------------------------------------------------------------------- the control's words


@pytest.mark.parametrize(
    ("gap", "mode", "said"),
    [
        (1.3, "max", "bf16 lowered val_acc by 1.30 points (worse; 95% CI 0.80 to 1.80)"),
        (-1.3, "max", "bf16 raised val_acc by 1.30 points (better; 95% CI 0.80 to 1.80)"),
        (1.3, "min", "bf16 lowered val_acc by 1.30 points (better; 95% CI 0.80 to 1.80)"),
        (-1.3, "min", "bf16 raised val_acc by 1.30 points (worse; 95% CI 0.80 to 1.80)"),
    ],
)
def test_the_change_is_said_the_right_way_round(gap: float, mode: str, said: str) -> None:
    """gap = fp32 - mixed: positive means the mixed run's value is lower. The interval reads
    as the verb does (amounts lowered, or raised)."""
    from tuitrain.metrics.parity_report import change_text

    ci = [0.8, 1.8] if gap > 0 else [-1.8, -0.8]
    assert change_text("bf16", "val_acc", gap, ci, True, mode) == said


def test_a_metric_in_its_own_units_and_no_change() -> None:
    from tuitrain.metrics.parity_report import change_text

    assert change_text("fp16", "val_loss", -0.0123, None, False, "min") == (
        "fp16 raised val_loss by 0.0123 (worse)"
    )
    unchanged = change_text("fp16", "val_loss", 0.0, None, False, "min")
    assert unchanged == "fp16 left val_loss unchanged"


def test_more_than_the_seed_only_when_the_intervals_say_so() -> None:
    from tuitrain.metrics.parity_report import control_verdict

    apart = control_verdict("bf16", "val_acc", "max", True, 1.3, [0.9, 1.7], 0.2, [-0.3, 0.6])
    assert apart[1] is True and "more than the seed (the 95% intervals do not overlap)" in apart[0]
    assert apart[0].startswith("bf16 lowered val_acc by 1.30 points")
    assert "changing the seed lowered it by 0.20 points" in apart[0]
    overlap = control_verdict("bf16", "val_acc", "max", True, 1.3, [0.1, 2.5], 0.2, [-0.6, 1.0])
    assert overlap[1] is None and "more than the seed" not in overlap[0]
    assert "not shown beyond run-to-run noise" in overlap[0]
    unknown = control_verdict("bf16", "val_mae", "min", False, 0.5, None, 0.1, None)
    assert unknown[1] is None and "more than the seed" not in unknown[0]
    within = control_verdict("bf16", "val_acc", "max", True, -0.2, [-0.6, 0.2], 0.4, [0.0, 0.8])
    assert within[1] is False and "no more than the seed" in within[0]
    assert within[0].startswith("bf16 raised val_acc by 0.20 points (better")


def test_the_verdict_becomes_an_event_of_the_run_it_was_started_from(tmp_path) -> None:
    """The dashboard's parity check: its verdict is appended to the hosted run's
    metrics.jsonl (after whatever the run wrote, an end record included) and its store."""
    import json

    from tuitrain.metrics.parity_report import EpochRow, ParityResult, record_verdict
    from tuitrain.metrics.records import end_record
    from tuitrain.metrics.sinks import JsonlSink
    from tuitrain.metrics.store import MetricStore
    from tuitrain.rundir.read import read_records

    run = tmp_path / "run"
    sink = JsonlSink(run / "metrics.jsonl")
    sink.write(end_record("stopped", "quit", 40))
    sink.close()
    r = ParityResult(preset="p", mixed="bf16", device="cpu", epochs=1, seed=0)
    r.per_epoch = [EpochRow(1, fp32_acc=0.85, mixed_acc=0.837)]
    r.test_set_size = 1000
    store = MetricStore()
    event = record_verdict(run / "metrics.jsonl", r, run / "parity", store)
    assert event is not None and event["verdict"] == "FAIL" and event["level"] == "warning"
    last = list(read_records(run / "metrics.jsonl"))[-1]
    assert last["kind"] == "parity" and last["phase"] == "verdict"
    assert last["gap_points"] == pytest.approx(1.3) and last["parity_dir"] == str(run / "parity")
    assert "time" in last and "parity FAIL" in last["message"]
    assert store.snapshot().events[-1]["verdict"] == "FAIL"
    r.status = "cancelled"
    assert record_verdict(run / "metrics.jsonl", r) is None  # nothing to say: nothing written
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
