"""The straggler rule (slowest rank's own work > 1.2x the median), its warning's hysteresis,
and the per-rank table the Throughput panel shows."""

from __future__ import annotations

from typing import Any

import pytest

from tuitrain.engine.diagnostics import Diagnostics
from tuitrain.metrics.alerts import BUSY_SCRIPT, QUIET, AlertRules
from tuitrain.metrics.records import straggler
from tuitrain.ui.ranks import MAX_RANK_ROWS, rank_note, rank_rows, rank_table


def test_straggler_rule() -> None:
    assert straggler([0.10, 0.10]) is None
    assert straggler([0.10, 0.16]) == 1  # median 0.13: 0.16 > 1.2 x 0.13 = 0.156
    assert straggler([0.10, 0.15]) is None  # 0.15 < 0.15 (1.2 x the median 0.125)
    assert straggler([0.1, 0.1, 0.1, 0.13]) == 3
    assert straggler([0.1]) is None and straggler([]) is None
    assert straggler([0.1, float("nan")]) is None  # a rank without a figure: no verdict
    # a fraction of a millisecond is timer noise on a loaded host, not a straggler
    assert straggler([0.0009, 0.0014]) is None and straggler([0.001, 0.0032]) == 1


class _Sink:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)


def test_alert_once_per_episode_not_per_flicker() -> None:
    sink = _Sink()
    diagnostics = Diagnostics(sink, log_every=10, data={"loader": "device"}, device="cpu")  # type: ignore[arg-type]
    step = 0

    def log(busy: list[float]) -> None:
        nonlocal step
        step += 10
        diagnostics.check({"data_wait_frac": 0.0, "rank_busy_s": busy}, step)

    said = sink.records
    for busy in ([1, 2], [1, 2], [1, 1], [1, 2]):  # rank 1 slow, a flicker, slow again
        log(busy)
    assert len(said) == 1 and said[0]["rank"] == 1 and said[0]["level"] == "warning"
    assert said[0]["kind"] == "alert" and said[0]["alert"] == "straggler"
    assert "2.00x" not in said[0]["message"] and "1.33x the median" in said[0]["message"]
    for _ in range(QUIET):  # a quiet spell: the next episode is news
        log([1, 1])
    log([1, 2])
    assert len(said) == 2
    log([2, 1])  # another rank takes over: news at once
    assert len(said) == 3 and said[-1]["rank"] == 0


def test_rank_table_flags_the_straggler() -> None:
    latest = {"rank_step_time_s": [0.2, 0.2], "rank_busy_s": [0.05, 0.1]}
    rows, rest = rank_rows(latest)
    assert [r.rank for r in rows] == [0, 1] and rest == 0
    assert rows[1].straggler and not rows[0].straggler
    assert abs(rows[1].vs_median - 0.1 / 0.075) < 1e-9
    table = rank_table(latest)
    assert "straggler" in table.splitlines()[-1] and "100.0 ms" in table
    assert rank_table({"rank_step_time_s": [0.2]}) == ""  # one process: no table


def test_many_ranks_show_the_slowest_and_a_count() -> None:
    busy = [0.05] * 8
    busy[5] = 0.09
    rows, rest = rank_rows({"rank_step_time_s": [0.2] * 8, "rank_busy_s": busy})
    assert len(rows) == MAX_RANK_ROWS - 1 and rest == 8 - len(rows)
    assert rows[0].rank == 5 and rows[0].straggler
    assert "more ranks" in rank_table({"rank_step_time_s": [0.2] * 8, "rank_busy_s": busy})


def test_forward_clock_counts_training_forwards_only() -> None:
    """The evaluation between epochs runs the same module in eval mode: not the step's work."""
    import time

    import torch
    from torch import nn

    from tuitrain.engine.ranktime import ForwardClock

    class Slow(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.01 if self.training else 0.2)
            return x

    module, clock = Slow(), ForwardClock(torch.device("cpu"))
    clock.attach(module)
    module(torch.zeros(1))
    module.eval()
    for _ in range(2):
        module(torch.zeros(1))
    seconds = clock.read()
    assert 0.01 <= seconds < 0.2  # one training forward, none of the two eval ones (0.2 s each)
    module.train()
    module(torch.zeros(1))
    assert clock.read() >= 0.01 and clock.read() == 0.0  # read() resets
    clock.detach()
    module(torch.zeros(1))
    assert clock.read() == 0.0


@pytest.mark.gpu
def test_forward_clock_reuses_cuda_events() -> None:
    import torch
    from torch import nn

    from tuitrain.engine.ranktime import ForwardClock

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    module, clock = nn.Linear(64, 64).cuda(), ForwardClock(torch.device("cuda"))
    clock.attach(module)
    x = torch.randn(32, 64, device="cuda")
    for _ in range(3):
        module(x)
    torch.cuda.synchronize()
    events = {id(e) for pair in clock._events for e in pair}
    assert len(events) == 6 and clock.read() > 0
    for _ in range(3):
        module(x)
    torch.cuda.synchronize()
    assert {id(e) for pair in clock._events for e in pair} == events  # the same six again
    assert clock.read() > 0


def test_rank_note_for_compact_layouts() -> None:
    assert rank_note({"rank_step_time_s": [0.2]}) == ""  # one process
    assert rank_note({"rank_step_time_s": [0.2] * 2, "rank_busy_s": [0.1, 0.1]}) == "2 ranks even"
    note = rank_note({"rank_step_time_s": [0.2] * 8, "rank_busy_s": [0.1] * 7 + [0.3]})
    assert "rank 7 straggler 3.00× median" in note  # found even when the table leaves rows out


def test_a_scripts_rows_without_rank_lists_do_not_end_a_straggler_episode() -> None:
    """A script's rank 0 puts the per-rank lists in the newest train record of each flush
    only: the rows between carry none, which is no sign the rank caught up."""
    rules = AlertRules({}, BUSY_SCRIPT)
    said = []
    for step in range(1, 41):
        record = {"step": step} | ({"rank_busy_s": [0.001, 0.032]} if step % 10 == 0 else {})
        said += rules.judge(record)
    assert [(a.name, a.figures["rank"]) for a in said] == [("straggler", 1)]
    assert said[0].message.startswith("rank 1 is a straggler: time outside collectives 32.0 ms")
    assert said[0].message.endswith("the other ranks wait for it in their collectives")
