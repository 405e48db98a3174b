"""Alert rules: judged on the train records the engine already writes, at log points (no extra
host sync), each with an action (`[alerts]` in a preset: off, warn, pause, checkpoint, stop).

An alert fires once per episode: when its condition starts to hold, not at every log point
while it holds; it can fire again once the condition has been clear for QUIET log points.
A stall (no step at all) cannot be seen in records, which stop coming: the engine's stall
watch (`tuitrain.engine.diagnostics.StallWatch`) judges it from the step counter, and with
more than one rank the rank watch (`tuitrain.engine.rankwatch`) names the rank that stalled.

No torch, no Textual: the engine, tests and tools can judge records with it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuitrain.metrics.records import SCALE_FLOOR, straggler

# what `rank_busy_s` measures, in the straggler alert's sentence: the engine's own timing of
# a rank's data wait + forward, or a script's time outside its collectives (the client's)
BUSY_ENGINE = ("data + forward", "every gradient all-reduce")
BUSY_SCRIPT = ("time outside collectives", "their collectives")
QUIET = 3  # log points without the condition before the same alert may fire again
SPIKE_WINDOW = 20  # the loss spike's median is over this many earlier log points
WARMUP_POINTS = 3  # throughput: the first log points (compile, cold caches) are not the norm
RULES = (
    "loss_spike",
    "scale_collapse",
    "throughput_drop",
    "memory_creep",
    "input_bound",
    "straggler",
    "stall",
    "stalled_rank",
    "nonfinite_loss",
    "nonfinite_metric",
    "divergence",
)


@dataclass(frozen=True)
class Alert:
    name: str
    action: str  # warn, pause, checkpoint, stop (stalled_rank: warn, stop)
    message: str
    figures: dict[str, Any] = field(default_factory=dict)


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def nonfinite_metric(names: list[str], step: object) -> tuple[str, dict[str, Any]]:
    return (
        f"{', '.join(names)} became NaN or Inf at step {step}: the task's metric is not a"
        " number (a division by zero in it, or the model diverging); check the metric, or"
        " lower optim.lr",
        {"metrics": names},
    )


class AlertRules:
    """Judges train records one by one; `judge(record)` returns the alerts that start now."""

    def __init__(self, cfg: Mapping[str, Any], busy: tuple[str, str] = BUSY_ENGINE) -> None:
        self.cfg = dict(cfg)
        self.busy = busy  # what rank_busy_s measures, and where the other ranks wait
        self.losses: deque[float] = deque(maxlen=SPIKE_WINDOW)
        self.rates: list[float] = []
        self.peak: float | None = None
        self.rising = 0
        self.waiting = 0
        self.active: dict[str, bool] = {}
        self.clear_for: dict[str, int] = {}
        self.straggler_rank: int | None = None  # another rank taking over is news at once
        self.first_loss: float | None = None  # divergence: where training started

    def diverged(self, record: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The loss above divergence_factor x the reference: the chance-level loss when the
        task declares one (`chance_loss` in the rules' config), else the first logged loss."""
        loss = _num(record.get("loss"))
        if loss is None:
            return None
        if self.first_loss is None:
            self.first_loss = loss
        chance = _num(self.cfg.get("chance_loss"))
        reference = chance if chance is not None and chance > 0 else self.first_loss
        factor = float(self.cfg.get("divergence_factor", 10.0))
        if reference is None or reference <= 0 or loss <= factor * reference:
            return None
        what = "the chance-level loss" if reference is chance else "the first logged loss"
        return (
            f"divergence: loss {loss:.4g} is {loss / reference:,.0f}x {what} ({reference:.4g}):"
            " the run diverged; lower optim.lr, set optim.grad_clip, or add warmup",
            {"loss": loss, "reference_loss": reference},
        )

    def action(self, name: str) -> str:
        return str(self.cfg.get(name, "warn"))

    def judge(self, record: Mapping[str, Any], nonfinite: Sequence[str] = ()) -> list[Alert]:
        """`nonfinite`: the task's own metrics that were NaN or Inf in this record (the
        record holds null for them)."""
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        if (diverged := self.diverged(record)) is not None:
            found["divergence"] = diverged
        if nonfinite:
            found["nonfinite_metric"] = nonfinite_metric(list(nonfinite), record.get("step"))
        loss = _num(record.get("loss"))
        if loss is not None:
            if len(self.losses) >= 5:
                median = statistics.median(self.losses)
                factor = float(self.cfg.get("loss_spike_factor", 3.0))
                if median > 0 and loss > factor * median:
                    found["loss_spike"] = (
                        f"loss spike: {loss:.4g} is {loss / median:.1f}x the median of the last "
                        f"{len(self.losses)} log points ({median:.4g}); lower optim.lr or set "
                        "optim.grad_clip",
                        {"loss": loss, "median_loss": median},
                    )
            self.losses.append(loss)
        scale = _num(record.get("grad_scale"))
        if scale is not None and scale < SCALE_FLOOR:
            found["scale_collapse"] = (
                f"GradScaler scale collapsed to {scale:g} (skipped {record.get('skipped_steps')} "
                "steps): gradients overflow fp16 again and again; try --precision bf16 or a "
                "lower lr",
                {"grad_scale": scale, "skipped_steps": record.get("skipped_steps")},
            )
        rate = _num(record.get("samples_per_s"))
        if rate is not None:
            self.rates.append(rate)
            norm = self.rates[WARMUP_POINTS:-1]
            ratio = float(self.cfg.get("throughput_drop_ratio", 0.5))
            if len(norm) >= 5 and rate < ratio * (median := statistics.median(norm)):
                found["throughput_drop"] = (
                    f"throughput dropped to {rate:,.0f} samples/s, {rate / median:.0%} of the "
                    f"run's median ({median:,.0f}): another process on the device, thermal "
                    "throttling, or a slower data source",
                    {"samples_per_s": rate, "median_samples_per_s": median},
                )
        peak = _num(record.get("mem_peak_bytes"))
        if peak is not None:
            self.rising = self.rising + 1 if self.peak is not None and peak > self.peak else 0
            self.peak = peak
            intervals = int(self.cfg.get("memory_creep_intervals", 10))
            if self.rising >= intervals:
                found["memory_creep"] = (
                    f"memory creep: the allocator's peak rose {self.rising} log points in a row, "
                    f"now {peak / 2**20:,.0f} MiB: something keeps tensors alive (a list of "
                    "losses without .item(), a growing cache)",
                    {"mem_peak_bytes": int(peak), "intervals": self.rising},
                )
        wait = _num(record.get("data_wait_frac"))
        if wait is not None:
            share = float(self.cfg.get("input_bound_share", 0.2))
            self.waiting = self.waiting + 1 if wait > share else 0
            if self.waiting >= int(self.cfg.get("input_bound_intervals", 3)):
                found["input_bound"] = (
                    f"input-bound: the loop waited for data {wait:.0%} of the step time, "
                    f"{self.waiting} log points in a row; raise data.num_workers or use "
                    "data.loader='device'",
                    {"data_wait_frac": wait, "intervals": self.waiting},
                )
        busy = record.get("rank_busy_s")
        unjudged = () if isinstance(busy, list) else ("straggler",)  # a script's rows between
        # its flushes carry no per-rank lists: no figure is not a rank that caught up
        if isinstance(busy, list) and all(_num(b) is not None for b in busy):
            slow = straggler([float(b) for b in busy])
            if slow is not None:
                median = statistics.median(busy)
                measure, where = self.busy
                found["straggler"] = (
                    f"rank {slow} is a straggler: {measure} {1000 * busy[slow]:.1f} ms "
                    f"per step, {busy[slow] / median:.2f}x the median ({1000 * median:.1f} "
                    f"ms); the other ranks wait for it in {where}",
                    {"rank": slow, "busy_s": busy[slow], "median_busy_s": median},
                )
        return self.episodes(found, unjudged)

    def episodes(
        self, found: Mapping[str, tuple[str, dict[str, Any]]], unjudged: Sequence[str] = ()
    ) -> list[Alert]:
        """The alerts whose condition starts to hold now (once per episode), rules not off;
        an `unjudged` rule (its figures absent from this record) keeps its episode as it is."""
        out = []
        for name in RULES:
            if name in unjudged:
                continue
            if name in found:
                self.clear_for[name] = 0
                news = not self.active.get(name)
                if name == "straggler":
                    rank = found[name][1]["rank"]
                    news = news or rank != self.straggler_rank
                    self.straggler_rank = rank
                if news and self.action(name) != "off":
                    message, figures = found[name]
                    out.append(Alert(name, self.action(name), message, figures))
                self.active[name] = True
            elif self.active.get(name):
                self.clear_for[name] = self.clear_for.get(name, 0) + 1
                if self.clear_for[name] >= QUIET:
                    self.active[name] = False
        return out
