"""Warnings the engine gives from its own train records, at log points only (no extra host
syncs): a visible data wait or an input-bound loop, a collapsed GradScaler scale, and under
DDP a straggler rank. The rules and thresholds live in `tuitrain.metrics.records`, shared with
the UI."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from tuitrain.metrics.records import SCALE_FLOOR, data_wait_verdict, event_record, straggler
from tuitrain.metrics.sinks import Sink

STRAGGLER_QUIET = 20  # log points without a straggler before the same rank is named again


class Diagnostics:
    """Judges each train record as it is written; says what it finds as warning events."""

    def __init__(self, sink: Sink, log_every: int, data: Mapping[str, Any], device: str) -> None:
        self.sink = sink
        self.log_every = log_every
        self.data = data  # the run's data config: the data-wait hint fits its loader
        self.device = device
        self.straggler_rank: int | None = None  # the last rank named a straggler
        self.straggler_quiet = 0  # log points since a straggler was seen

    def check(self, record: Mapping[str, Any], step: int) -> None:
        self.check_straggler(record.get("rank_busy_s") or [])
        verdict, hint = data_wait_verdict(record["data_wait_frac"], self.data, self.device)
        if (
            verdict != "ok"
            and step // self.log_every in (1, 2)
            or (verdict == "input-bound" and step % (self.log_every * 50) == 0)
        ):
            pct = 100 * record["data_wait_frac"]
            kind = "input_bound" if verdict == "input-bound" else "data_wait"
            self.sink.write(
                event_record(
                    f"data wait {pct:.0f}% of step time ({verdict}): {hint}",
                    level="warning",
                    kind=kind,
                )
            )
        scale = record["grad_scale"]
        if scale is not None and scale < SCALE_FLOOR:
            self.sink.write(
                event_record(
                    f"GradScaler scale collapsed to {scale:g} "
                    f"(skipped {record['skipped_steps']} steps): "
                    "gradients overflow fp16 again and again; try --precision bf16 or a lower lr",
                    level="warning",
                    kind="overflow",
                )
            )

    def check_straggler(self, busy: list[float]) -> None:
        """Under DDP: say when a rank becomes a straggler (its own work per step, data wait +
        forward, above 1.2x the median). The same rank is named again only after
        STRAGGLER_QUIET log points without a straggler (no warning per flicker)."""
        slow = straggler(busy)
        if slow is None:
            self.straggler_quiet += 1
            return
        if slow == self.straggler_rank and self.straggler_quiet < STRAGGLER_QUIET:
            self.straggler_quiet = 0
            return
        self.straggler_rank, self.straggler_quiet = slow, 0
        median = statistics.median(busy)
        self.sink.write(
            event_record(
                f"rank {slow} is a straggler: data + forward {1000 * busy[slow]:.1f} ms per "
                f"step, {busy[slow] / median:.2f}x the median ({1000 * median:.1f} ms); "
                "the other ranks wait for it in every gradient all-reduce",
                level="warning",
                kind="straggler",
                rank=slow,
            )
        )
