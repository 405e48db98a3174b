"""The parity check's results and stores: torch-free, so the UI and the CLI load them fast.

`ParityResult` (the verdict, per-epoch rows, speedup, `parity.json`), `ParityStores` (one
MetricStore per run for a UI) and the small helpers. The check itself is in
`tuitrain.engine.parity`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tuitrain.errors import EXIT_FAILED, EXIT_OK, EXIT_PARITY_FAIL
from tuitrain.metrics.sinks import Sink, StoreSink, to_json_line
from tuitrain.metrics.store import MetricStore, Snapshot
from tuitrain.safefile import write_atomic_text

THRESHOLD_POINTS = 0.5  # the seeds: "un écart de plus de 0,5 point signale un problème"
EARLY_STEPS = 20
# Same weights, same batches: the first 20 per-step losses agree within 0.2-2% in bf16 on
# fashion-mini and 1% (bf16) / 0.9% (fp16) on Fashion-MNIST; a broken run is off by tens of %.
EARLY_WARN_REL_DIFF = 0.10
MIXED_CHOICES = ("bf16", "fp16")
RUNS = ("fp32", "mixed")
_VAL_COUNT = re.compile(r"/ ([\d,]+) val\)")


def gap_points(fp32_acc: float | None, mixed_acc: float | None) -> float | None:
    """fp32 minus mixed, in accuracy points (positive: mixed is worse), without float noise."""
    if fp32_acc is None or mixed_acc is None:
        return None
    return round(100.0 * (fp32_acc - mixed_acc), 6)


@dataclass(slots=True)
class EpochRow:
    epoch: int
    fp32_val_acc: float | None = None
    mixed_val_acc: float | None = None
    fp32_val_loss: float | None = None
    mixed_val_loss: float | None = None

    @property
    def gap_points(self) -> float | None:
        return gap_points(self.fp32_val_acc, self.mixed_val_acc)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "gap_points": self.gap_points}


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

    def final(self, key: str) -> float | None:
        return getattr(self.per_epoch[-1], key) if self.per_epoch else None

    @property
    def gap_points(self) -> float | None:
        return gap_points(self.final("fp32_val_acc"), self.final("mixed_val_acc"))

    @property
    def verdict(self) -> str | None:
        """PASS, FAIL, ERROR (a run failed), or None (cancelled: nothing to judge)."""
        if self.status == "cancelled":
            return None
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
    def exit_code(self) -> int:
        return {"PASS": EXIT_OK, "FAIL": EXIT_PARITY_FAIL}.get(self.verdict or "", EXIT_FAILED)

    def summary(self) -> str:
        """One line: the verdict, the numbers behind it, and their resolution."""
        fp32_acc, mixed_acc = self.final("fp32_val_acc"), self.final("mixed_val_acc")
        # PASS/FAIL imply a gap, so both accuracies are there (the None checks narrow types)
        if self.verdict in (None, "ERROR") or fp32_acc is None or mixed_acc is None:
            return f"parity {self.verdict or 'cancelled'}: {self.message}"
        n, sign = self.test_set_size, "<=" if self.verdict == "PASS" else ">"
        images = f"{n:,} test images, one image = {100 / n:.2f} point" if n else "size unknown"
        speed = f"{self.speedup:.2f}x" if self.speedup else "n/a"
        return (
            f"parity {self.verdict}: fp32 {100 * fp32_acc:.2f}% vs {self.mixed}"
            f" {100 * mixed_acc:.2f}%, gap {self.gap_points:+.2f} point"
            f" (|gap| {sign} {self.threshold_points}; {images}); speedup {speed}"
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON of parity.json and `--json`: the verdict and its numbers first."""
        out: dict[str, Any] = {"verdict": self.verdict, "reference": "fp32 (TF32 off)"}
        for key in ("fp32_val_acc", "mixed_val_acc", "fp32_val_loss", "mixed_val_loss"):
            out[key] = self.final(key)
        out["gap_points"], out["speedup"] = self.gap_points, self.speedup
        out["one_image_points"] = self.one_image_points
        out |= {f.name: getattr(self, f.name) for f in fields(self)}
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

    def sink(self) -> Sink:
        return _RouteByRun({"fp32": StoreSink(self.fp32), "mixed": StoreSink(self.mixed)})

    def reset(self) -> None:
        self.fp32.reset()
        self.mixed.reset()


class _RouteByRun(Sink):
    def __init__(self, routes: dict[str, Sink]) -> None:
        self.routes = routes

    def write(self, record: Mapping[str, Any]) -> None:
        if record.get("early"):
            return
        route = self.routes.get(record.get("run", ""))
        for sink in [route] if route else self.routes.values():
            sink.write(record)


def parity_result_of(snapshot: Snapshot) -> Mapping[str, Any] | None:
    """The result dict of the last finished parity in a store's snapshot, if any."""
    for rec in reversed(snapshot.events):
        if rec.get("kind") == "parity" and rec.get("phase") in ("done", "cancelled"):
            return rec.get("result")
    return None


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


def write_parity_json(result: ParityResult, run_dir: Path) -> Path:
    """`run_dir/parity.json`, written atomically (NaN/inf become null)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json.loads(to_json_line(result.to_json())), indent=2) + "\n"
    return write_atomic_text(run_dir / "parity.json", text)
