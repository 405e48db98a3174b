"""The parity check's results and stores: torch-free, so the UI and the CLI load them fast.

`ParityResult` (the verdict, per-epoch rows, speedup, `parity.json`), `ParityStores` (one
MetricStore per run for a UI) and the small helpers. The check itself is in
`tuitrain.engine.parity`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tuitrain.core.errors import EXIT_FAILED, EXIT_OK, EXIT_PARITY_FAIL
from tuitrain.core.safefile import write_atomic_text
from tuitrain.metrics.records import CLASSIFY_PRIMARY, event_record
from tuitrain.metrics.sinks import JsonlSink, Sink, StoreSink, to_json_line
from tuitrain.metrics.store import MetricStore, Snapshot

THRESHOLD_POINTS = 0.5  # the seeds: "un écart de plus de 0,5 point signale un problème"
EARLY_STEPS = 20
# Same weights, same batches: the first 20 per-step losses agree within 0.2-2% in bf16 on
# fashion-mini and 1% (bf16) / 0.9% (fp16) on Fashion-MNIST; a broken run is off by tens of %.
EARLY_WARN_REL_DIFF = 0.10
MIXED_CHOICES = ("bf16", "fp16")
RUNS = ("fp32", "mixed")
_VAL_COUNT = re.compile(r"/ ([\d,]+) val\)")
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
SETTLE = "more epochs (--epochs), the full test set (data.val_samples=0) or more seeds (--seed)"


def gap_points(fp32_acc: float | None, mixed_acc: float | None) -> float | None:
    """fp32 minus mixed, in accuracy points (positive: mixed is worse), without float noise."""
    if fp32_acc is None or mixed_acc is None:
        return None
    return round(100.0 * (fp32_acc - mixed_acc), 6)


# --------------------------------------------------------------------------- paired statistics


@dataclass(frozen=True, slots=True)
class PairedCounts:
    """The two runs' final evaluations, image by image, on the same test images: how many
    both got right, only fp32, only the mixed run, neither."""

    both: int
    fp32_only: int
    mixed_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.fp32_only + self.mixed_only + self.neither

    def to_json(self) -> dict[str, int]:
        return {
            "both": self.both, "fp32_only": self.fp32_only,
            "mixed_only": self.mixed_only, "neither": self.neither,
        }  # fmt: skip


def change_text(
    who: str, key: str, gap: float, ci: Sequence[float] | None, points: bool, mode: str | None
) -> str:
    """`bf16 lowered val_bpc by 0.013 (better; 95% CI 0.008 to 0.018)`: what `who` did to
    the metric against fp32, from `gap` = fp32 - who (positive: `who` lowered it) and its
    interval, the sign said in words ("lowered", "raised") and never as a signed number."""
    unit = " points" if points else ""
    shown = (lambda v: f"{v:.2f}") if points else (lambda v: f"{v:.4g}")
    if gap == 0:
        return f"{who} left {key} unchanged"
    verb = "lowered" if gap > 0 else "raised"
    notes = []
    if mode in ("min", "max"):
        notes.append("worse" if (gap > 0) == (mode == "max") else "better")
    if ci is not None and len(ci) == 2:
        low, high = (ci[0], ci[1]) if gap > 0 else (-ci[1], -ci[0])  # as the verb reads
        notes.append(f"95% CI {shown(low)} to {shown(high)}")
    where = f" ({'; '.join(notes)})" if notes else ""
    return f"{who} {verb} {key} by {shown(abs(gap))}{unit}{where}"


def control_verdict(
    mixed: str,
    key: str,
    mode: str | None,
    points: bool,
    mixed_gap: float,
    mixed_ci: Sequence[float] | None,
    seed_gap: float,
    seed_ci: Sequence[float] | None,
) -> tuple[str, bool | None]:
    """(sentence, beyond): did mixed precision move the metric more than changing the seed?
    Both gaps are fp32 minus the other run. `beyond` is True only when the intervals say so
    (|mixed gap| > |seed gap| and the two 95% intervals do not overlap), False when the
    mixed gap is no larger than the seed's, None when it is larger in these runs but the
    intervals overlap or are unknown: not shown beyond run-to-run noise."""
    said = change_text(mixed, key, mixed_gap, mixed_ci, points, mode)
    seed = change_text("changing the seed", "it", seed_gap, seed_ci, points, None)
    if abs(mixed_gap) <= abs(seed_gap):
        return f"{said}; {seed}: no more than the seed, within run-to-run noise", False
    if mixed_ci is not None and seed_ci is not None and len(mixed_ci) == len(seed_ci) == 2:
        apart = mixed_ci[0] > seed_ci[1] or seed_ci[0] > mixed_ci[1]
        if apart:
            return f"{said}; {seed}: more than the seed (the 95% intervals do not overlap)", True
        return (
            f"{said}; {seed}: larger than the seed's in these runs, but the 95% intervals "
            f"overlap, so not shown beyond run-to-run noise; settle it with {SETTLE}"
        ), None
    return (
        f"{said}; {seed}: larger than the seed's in these runs, with no intervals to show it "
        "is beyond run-to-run noise"
    ), None


def mcnemar_exact_p(b: int, c: int) -> float:
    """The exact (binomial) two-sided McNemar p-value for b and c discordant pairs:
    min(1, 2 P[X <= min(b, c)]) with X ~ Binomial(b + c, 1/2); 1 when b + c = 0.

    Summed from k = min(b, c) down, each term from the one above (t(k-1) = t(k) k / (m-k+1)),
    the first through lgamma: no big integers, and it stops once the terms stop counting, so
    millions of discordant pairs cost about sqrt(m) terms.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, not {b} and {c}")
    m, k = b + c, min(b, c)
    if m == 0:
        return 1.0
    log_term = math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1) - m * math.log(2)
    term = math.exp(log_term)
    total = 0.0
    while k >= 0 and term > 0.0:
        total += term
        if term < total * 1e-17:
            break
        term *= k / (m - k + 1)
        k -= 1
    return min(1.0, 2.0 * total)


def wilson_interval(x: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of the proportion x / n."""
    center = (x + z * z / 2) / (n + z * z)
    half = z * math.sqrt(x * (n - x) / n + z * z / 4) / (n + z * z)
    return max(0.0, center - half), min(1.0, center + half)


def paired_diff_ci(counts: PairedCounts, z: float = Z95) -> tuple[float, float]:
    """A confidence interval (95% by default) of p1 - p2, the difference of two paired
    proportions (p1: fp32's accuracy, p2: the mixed run's), by Newcombe's hybrid score
    ("square-and-add") method for paired data (Newcombe 1998, method 10): the Wilson intervals
    of p1 and p2 combined with the estimated correlation phi of the two runs' hits, phi's
    numerator a*d - b*c shrunk by n/2 towards 0 when positive (Newcombe's correction).

    Chosen over the Wald interval, which is [0, 0] when no image is discordant and too narrow
    with few: this one has close to nominal coverage down to small n, stays inside [-1, 1],
    and contains the estimate (b - c) / n by construction.
    """
    a, b, c, d, n = counts.both, counts.fp32_only, counts.mixed_only, counts.neither, counts.n
    if n <= 0:
        raise ValueError("no image to compare")
    p1, p2 = (a + b) / n, (a + c) / n
    diff = p1 - p2
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = 0.0
    if margins > 0:
        cross = a * d - b * c
        num = cross - n / 2 if cross > n / 2 else (float(cross) if cross < 0 else 0.0)
        phi = max(-1.0, min(1.0, num / math.sqrt(margins)))
    below = (p1 - l1) ** 2 + (u2 - p2) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2)
    above = (p2 - l2) ** 2 + (u1 - p1) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1)
    low = diff - math.sqrt(max(0.0, below))
    high = diff + math.sqrt(max(0.0, above))
    return max(-1.0, low), min(1.0, high)


def gap_ci95_points(counts: PairedCounts, gap: float | None = None) -> list[float]:
    """The 95% interval of the gap (fp32 minus mixed) in points, rounded outwards to 1e-4
    point, within [-100, 100], and always containing `gap` (default: the counts' own)."""
    low, high = paired_diff_ci(counts)
    if gap is None:
        gap = 100.0 * (counts.fp32_only - counts.mixed_only) / counts.n
    low_pt = max(-100.0, min(math.floor(100.0 * low * 1e4) / 1e4, gap))
    high_pt = min(100.0, max(math.ceil(100.0 * high * 1e4) / 1e4, gap))
    return [low_pt, high_pt]


@dataclass(slots=True)
class MetricParity:
    """A task other than classification: its primary metric's final values in both runs, the
    gap (fp32 minus mixed) in the metric's own units and its paired 95% interval over the
    validation items (or none: the task gave batch means only), judged against a tolerance."""

    name: str  # the eval record's field, e.g. val_loss
    mode: str  # min | max: which way is better
    tolerance: float
    tolerance_source: str  # --tolerance, task.tolerance, the task's own, or the default
    fp32: float | None = None
    mixed: float | None = None
    per_epoch: list[tuple[float | None, float | None]] = field(default_factory=list)
    ci95: list[float] | None = None
    items: int | None = None  # how many validation items were paired

    @property
    def gap(self) -> float | None:
        if self.fp32 is None or self.mixed is None:
            return None
        return self.fp32 - self.mixed

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "gap": self.gap}


def paired_mean_ci(fp32: list[float], mixed: list[float], z: float = Z95) -> list[float] | None:
    """The 95% interval of the mean per-item difference (fp32 - mixed): mean +- z * sd /
    sqrt(n) over the paired items (normal approximation: n is hundreds or more)."""
    n = len(fp32)
    if n < 2 or n != len(mixed):
        return None
    diffs = [a - b for a, b in zip(fp32, mixed, strict=True)]
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    half = z * math.sqrt(var / n)
    return [mean - half, mean + half]


@dataclass(slots=True)
class EpochRow:
    """One epoch of a classification parity check: each run's accuracy (the classify task's
    primary metric, CLASSIFY_PRIMARY) and validation loss."""

    epoch: int
    fp32_acc: float | None = None
    mixed_acc: float | None = None
    fp32_val_loss: float | None = None
    mixed_val_loss: float | None = None

    @property
    def gap_points(self) -> float | None:
        return gap_points(self.fp32_acc, self.mixed_acc)

    def to_json(self) -> dict[str, Any]:
        """Its fields as the report names them (`fp32_<metric>`, the eval field's name)."""
        return {**{json_key(k): v for k, v in asdict(self).items()}, "gap_points": self.gap_points}


def json_key(field_name: str) -> str:
    """A report field's JSON name: `fp32_acc` -> fp32_ + the classifier's accuracy field."""
    run, _, what = field_name.partition("_")
    return f"{run}_{CLASSIFY_PRIMARY}" if what == "acc" else field_name


@dataclass(slots=True)
class ParityResult:
    """What the check measured; `verdict` and `exit_code` follow from it."""

    preset: str
    mixed: str  # the resolved mixed precision: bf16 | fp16
    device: str
    epochs: int
    seed: int
    status: str = "completed"  # completed | cancelled | failed
    message: str = ""  # why it failed or was cancelled
    per_epoch: list[EpochRow] = field(default_factory=list)
    fp32_samples_per_s: float | None = None
    mixed_samples_per_s: float | None = None
    test_set_size: int | None = None
    early_steps: int = 0
    early_max_rel_loss_diff: float | None = None
    early_losses: dict[str, list[float]] = field(default_factory=dict)
    train_loss: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    threshold_points: float = THRESHOLD_POINTS
    elapsed_s: float = 0.0
    # the last epoch's evaluations paired image by image (None: a run has no final evaluation)
    paired: PairedCounts | None = None
    metric: MetricParity | None = None  # a task other than classify: its primary metric
    # --control: an fp32 run with another seed, and how far the seed alone moves the metric
    control: dict[str, Any] | None = None

    def final(self, key: str) -> float | None:
        return getattr(self.per_epoch[-1], key) if self.per_epoch else None

    @property
    def gap_points(self) -> float | None:
        return gap_points(self.final("fp32_acc"), self.final("mixed_acc"))

    @property
    def verdict(self) -> str | None:
        """PASS, FAIL, ERROR (a run failed), or None (cancelled: nothing to judge)."""
        if self.status == "cancelled":
            return None
        if self.metric is not None:
            gap = self.metric.gap
            if self.status == "failed" or gap is None:
                return "ERROR"
            return "PASS" if abs(gap) <= self.metric.tolerance * (1 + 1e-9) else "FAIL"
        gap = self.gap_points
        if self.status == "failed" or gap is None:
            return "ERROR"
        # |gap|: a mixed run *better* by more than the threshold is not the same training either
        return "PASS" if abs(gap) <= self.threshold_points + 1e-9 else "FAIL"

    @property
    def speedup(self) -> float | None:
        """Mixed samples/s over fp32 samples/s."""
        fp32, mixed = self.fp32_samples_per_s, self.mixed_samples_per_s
        return mixed / fp32 if fp32 and mixed else None

    @property
    def one_image_points(self) -> float | None:
        """What one test image is worth, in accuracy points: the resolution of the verdict."""
        return 100.0 / self.test_set_size if self.test_set_size else None

    @property
    def discordant(self) -> dict[str, int] | None:
        """Test images only fp32 got right, and only the mixed run got right."""
        p = self.paired
        return None if p is None else {"fp32_only": p.fp32_only, "mixed_only": p.mixed_only}

    @property
    def p_value(self) -> float | None:
        """Exact McNemar p-value: how likely discordances this lopsided are by chance alone."""
        p = self.paired
        return None if p is None else mcnemar_exact_p(p.fp32_only, p.mixed_only)

    @property
    def gap_ci95_points(self) -> list[float] | None:
        """The paired 95% interval of the gap in points (Newcombe's method 10), around it."""
        p = self.paired
        return None if p is None or p.n == 0 else gap_ci95_points(p, self.gap_points)

    @property
    def noise_note(self) -> str | None:
        """One sentence when the verdict and the noise disagree: a FAIL whose interval
        reaches back within the threshold (within noise when it includes 0), or a PASS whose
        interval reaches past it; None when they agree or nothing was paired."""
        ci, p, t = self.gap_ci95_points, self.p_value, self.threshold_points
        if ci is None or p is None or self.verdict not in ("PASS", "FAIL"):
            return None
        low, high = ci
        interval = f"the 95% interval of the gap [{low:+.2f}, {high:+.2f}]"
        settle = f"; settle it with {SETTLE}."
        if self.verdict == "PASS" and max(-low, high) > t + 1e-9:
            return (
                f"PASS, but {interval} reaches past {t} point (p = {format_p(p)}): a gap "
                f"that large is not ruled out{settle}"
            )
        if self.verdict == "FAIL" and low <= t + 1e-9 and high >= -t - 1e-9:
            if low <= 0 <= high:
                return f"FAIL, but within noise: {interval} includes 0 (p = {format_p(p)}){settle}"
            return f"FAIL, but {interval} reaches back within {t} point (p = {format_p(p)}){settle}"
        return None

    def noise_line(self) -> str | None:
        """`discordant 3 fp32-only / 1 bf16-only · McNemar p = 0.63 · 95% CI [..] point`."""
        d, p, ci = self.discordant, self.p_value, self.gap_ci95_points
        if d is None or p is None or ci is None:
            return None
        return (
            f"discordant images {d['fp32_only']:,} only fp32 right / {d['mixed_only']:,} only "
            f"{self.mixed} right; exact McNemar p = {format_p(p)}; gap 95% CI "
            f"[{ci[0]:+.2f}, {ci[1]:+.2f}] point (paired, Newcombe)"
        )

    @property
    def exit_code(self) -> int:
        return {"PASS": EXIT_OK, "FAIL": EXIT_PARITY_FAIL}.get(self.verdict or "", EXIT_FAILED)

    def summary(self) -> str:
        """One line: the verdict, the numbers behind it, and their resolution."""
        if self.metric is not None and self.verdict in ("PASS", "FAIL"):
            return self.metric_summary(self.metric)
        fp32_acc, mixed_acc = self.final("fp32_acc"), self.final("mixed_acc")
        # PASS/FAIL imply a gap, so both accuracies are there (the None checks narrow types)
        if self.verdict in (None, "ERROR") or fp32_acc is None or mixed_acc is None:
            return f"parity {self.verdict or 'cancelled'}: {self.message}"
        n, sign = self.test_set_size, "<=" if self.verdict == "PASS" else ">"
        images = f"{n:,} test images, one image = {100 / n:.2f} point" if n else "size unknown"
        speed = f"{self.speedup:.2f}x" if self.speedup else "n/a"
        ci, p = self.gap_ci95_points, self.p_value
        noise = "" if ci is None or p is None else (
            f", 95% CI [{ci[0]:+.2f}, {ci[1]:+.2f}], McNemar p = {format_p(p)}"
        )  # fmt: skip
        return (
            f"parity {self.verdict}: fp32 {100 * fp32_acc:.2f}% vs {self.mixed}"
            f" {100 * mixed_acc:.2f}%, gap {self.gap_points:+.2f} point{noise}"
            f" (|gap| {sign} {self.threshold_points}; {images}); speedup {speed}"
        )

    def control_line(self) -> str | None:
        """`fp32 with seed 1: METRIC 85.10%; bf16 lowered METRIC by 1.30 points (worse; 95%
        CI 0.80 to 1.80), changing the seed lowered it by 0.30 point (...): more than the
        seed, ...` (the control's `verdict`, `control_verdict`'s sentence)."""
        c = self.control
        if not c:
            return None
        pct = c["unit"] == "points"
        value = f"{100 * c['value']:.2f}%" if pct else f"{c['value']:.4f}"
        return f"fp32 with seed {c['seed']}: {c['metric']} {value}; {c['verdict'] or 'no verdict'}"

    def metric_summary(self, m: MetricParity) -> str:
        sign = "<=" if self.verdict == "PASS" else ">"
        speed = f"{self.speedup:.2f}x" if self.speedup else "n/a"
        ci = (
            f", 95% CI [{m.ci95[0]:+.4g}, {m.ci95[1]:+.4g}] paired over {m.items:,} items"
            if m.ci95 is not None and m.items
            else ", no interval (the task gives no per-item values)"
        )
        return (
            f"parity {self.verdict}: fp32 {m.name} {m.fp32:.4f} vs {self.mixed} {m.mixed:.4f},"
            f" gap {m.gap:+.4g}{ci} (|gap| {sign} {m.tolerance:g}, {m.tolerance_source});"
            f" speedup {speed}"
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON of parity.json and `--json`: the verdict and its numbers first."""
        out: dict[str, Any] = {"verdict": self.verdict, "reference": "fp32 (TF32 off)"}
        if self.metric is not None:
            out["metric"] = self.metric.to_json()
        if self.control is not None:
            out["control"] = self.control
        for key in ("fp32_acc", "mixed_acc", "fp32_val_loss", "mixed_val_loss"):
            out[json_key(key)] = self.final(key)
        out["gap_points"], out["speedup"] = self.gap_points, self.speedup
        out["one_image_points"] = self.one_image_points
        out["discordant"], out["p_value"] = self.discordant, self.p_value
        out["gap_ci95_points"], out["noise_note"] = self.gap_ci95_points, self.noise_note
        out |= {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("paired", "metric", "control")
        }
        out["paired"] = None if self.paired is None else self.paired.to_json()
        out["per_epoch"] = [row.to_json() for row in self.per_epoch]
        out["train_loss"] = {k: [list(p) for p in v] for k, v in self.train_loss.items()}
        out["elapsed_s"] = round(self.elapsed_s, 3)
        return out


class ParityStores:
    """One MetricStore per run, for a UI: overlaid loss curves, per-epoch evals, progress.

    `sink()` routes records by their "run" tag; parity events (untagged) go to both stores;
    early-check records to neither (their losses travel in the "early" parity event).
    """

    def __init__(self) -> None:
        self.fp32 = MetricStore()
        self.mixed = MetricStore()
        self.control = MetricStore()  # --control's fp32 run with another seed

    def sink(self) -> Sink:
        return _RouteByRun(
            {
                "fp32": StoreSink(self.fp32),
                "mixed": StoreSink(self.mixed),
                "control": StoreSink(self.control),
            }
        )

    def reset(self) -> None:
        self.fp32.reset()
        self.mixed.reset()
        self.control.reset()


class _RouteByRun(Sink):
    def __init__(self, routes: dict[str, Sink]) -> None:
        self.routes = routes

    def write(self, record: Mapping[str, Any]) -> None:
        if record.get("early"):
            return
        route = self.routes.get(record.get("run", ""))
        for sink in [route] if route else self.routes.values():
            sink.write(record)


def verdict_event(result: ParityResult, parity_dir: Path | None = None) -> dict[str, Any]:
    """The parity check's verdict as an event of the run it was started from (kind
    "parity", phase "verdict"): its summary (and the control's sentence), the numbers behind
    it, and where its files are."""
    message = result.summary()
    if result.control and result.control.get("verdict"):
        message += f"; control: {result.control['verdict']}"
    level = {"PASS": "info", "FAIL": "warning", None: "info"}.get(result.verdict, "error")
    return event_record(
        message[:4000], level=level, kind="parity", phase="verdict", verdict=result.verdict,
        mixed=result.mixed, gap_points=result.gap_points, speedup=result.speedup,
        mixed_beyond_seed=(result.control or {}).get("mixed_beyond_seed"),
        parity_dir=None if parity_dir is None else str(parity_dir),
    )  # fmt: skip


def record_verdict(
    metrics: Path,
    result: ParityResult,
    parity_dir: Path | None = None,
    store: MetricStore | None = None,
) -> dict[str, Any] | None:
    """Append the verdict event to `metrics`, the metrics file of the run the check was
    started from (its own sink is paused or closed, and each append is one whole line), and push it
    into its `store` (the dashboard's event log). None when there is nothing to say (a
    cancelled check) or the file cannot be written."""
    if result.verdict is None:
        return None
    event = verdict_event(result, parity_dir)
    if store is not None:
        store.push(event)
    try:
        sink = JsonlSink(metrics)
    except OSError:
        return None
    try:
        sink.write(event)
    finally:
        sink.close()
    return None if sink.failed else event


def parity_result_of(snapshot: Snapshot) -> Mapping[str, Any] | None:
    """The result dict of the last finished parity in a store's snapshot, if any."""
    for rec in reversed(snapshot.events):
        if rec.get("kind") == "parity" and rec.get("phase") in ("done", "cancelled"):
            return rec.get("result")
    return None


def format_p(p: float) -> str:
    """A p-value for people: two significant digits, `< 0.0001` below that."""
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def max_rel_diff(reference: list[float], other: list[float]) -> float | None:
    """The largest |other - reference| / |reference| over the steps both have."""
    pairs = list(zip(reference, other, strict=False))
    if not pairs:
        return None
    return max(abs(b - a) / max(abs(a), 1e-12) for a, b in pairs)


def count_test_images(header: Mapping[str, Any]) -> int | None:
    """Validation images of a run, from its header record."""
    count = header.get("val_samples")
    if isinstance(count, int):
        return count
    match = _VAL_COUNT.search(str(header.get("data", "")))  # "(60,000 train / 10,000 val)"
    return int(match.group(1).replace(",", "")) if match else None


def write_parity_json(result: ParityResult, path: Path) -> Path:
    """The result as JSON at `path` (a run dir's parity file), written atomically (NaN/inf
    become null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json.loads(to_json_line(result.to_json())), indent=2) + "\n"
    return write_atomic_text(path, text)
