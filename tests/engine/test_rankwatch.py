"""The stalled-rank watch's judgement (engine/rankwatch.py) on synthetic heartbeats: who is
behind, a dead peer, the bound, episodes; and rank 0's watch over a real c10d store, which
asks for stacks and writes them."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from tuitrain.core.config import ConfigError, load_preset
from tuitrain.core.control import Control
from tuitrain.engine.rankwatch import (
    OWN_WORK,
    Beat,
    Progress,
    RankWatch,
    Stalled,
    StepClock,
    Verdict,
    describe,
    flight_recorder_env,
    stall_bound,
)
from tuitrain.rundir.layout import RunDir

BOUND = 30.0


def beat(n: int, micro: int, phase: str, step: int = 4, done: bool = False, work: str = "") -> Beat:
    return Beat(n, micro, phase, step, done, pid=4242, host="node7", work=work)


def test_the_bound_is_the_floor_or_a_multiple_of_the_median_step() -> None:
    assert stall_bound(30.0, 10.0, None) == 30.0  # no step seen yet
    assert stall_bound(30.0, 10.0, 0.5) == 30.0
    assert stall_bound(30.0, 10.0, 12.0) == 120.0  # a slow model's step is not a stall
    clock = StepClock()
    for step, now in [(0, 0.0), (0, 1.0), (2, 2.0), (3, 5.0), (3, 6.0), (4, 7.0)]:
        clock.observe(step, now)
    assert clock.median_s == 2.0  # per step: 1.0 (2 in 2 s), 3.0, 2.0


def test_a_rank_behind_the_others_is_named_after_the_bound_from_when_they_went_ahead() -> None:
    verdict = Verdict(3, now=100.0)
    same = {r: beat(0, 9, "backward") for r in range(3)}
    assert verdict.judge(same, 100.0, BOUND) == []
    # rank 2 is in its forward of micro-batch 10; ranks 0 and 1 went on into the backward
    for t in range(1, 40):
        beats = {0: beat(t, 10, "backward"), 1: beat(t, 10, "backward"), 2: beat(t, 10, "forward")}
        found = verdict.judge(beats, 100.0 + t, BOUND)
        if t < 31:
            assert found == [], t  # the bound counts from when the others went ahead (t=1)
    [stalled] = found
    assert stalled.rank == 2 and stalled.why == "behind" and stalled.waiting == (0, 1)
    assert stalled.seconds == pytest.approx(38.0)
    message, figures, step = describe(stalled, Path("/run/stacks"))
    assert step == 5 and figures["phase"] == "forward" and figures["rank"] == 2
    assert "rank 2 has not moved for 38 s (in step 5, phase forward)" in message
    assert "ranks 0, 1 wait for it" in message and message.endswith("/run/stacks/")


def test_a_rank_that_moves_or_that_all_share_is_not_named() -> None:
    verdict = Verdict(2, now=0.0)
    for t in range(100):  # lockstep: positions differ at each look, but they move
        beats = {0: beat(t, t // 2, "backward"), 1: beat(t, t // 2, ("data", "forward")[t % 2])}
        assert verdict.judge(beats, float(t), BOUND) == []
    verdict = Verdict(2, now=0.0)
    for t in range(100):  # both stuck at one place (one FSDP all-gather): no one to name
        beats = {0: beat(t, 7, "forward"), 1: beat(t, 7, "forward")}
        assert verdict.judge(beats, float(t), BOUND) == []


def test_a_silent_heartbeat_is_a_dead_peer_and_a_finished_rank_is_neither() -> None:
    verdict = Verdict(3, now=0.0)
    for t in range(1, 40):
        beats = {
            0: beat(t, 5, "backward"),
            1: beat(1, 5, "backward"),  # its heartbeat stopped at t=1
            2: beat(1, 5, "update", done=True),  # it left its loop: no beat, nobody waits
        }
        found = verdict.judge(beats, float(t), BOUND)
        assert [s.rank for s in found] == ([] if t < 31 else [1]), t
    assert found[0].why == "silent" and found[0].seconds == pytest.approx(38.0)
    message, _, _ = describe(found[0], None)
    assert message.startswith("rank 1's heartbeat stopped 38 s ago (in step 5, phase backward)")
    assert message.endswith("py-spy dump --pid 4242 on node7 shows where, if it lives")


def test_a_rank_whose_heartbeat_never_came_is_silent() -> None:
    verdict = Verdict(2, now=0.0)
    assert verdict.judge({0: beat(1, 0, "update"), 1: None}, 10.0, BOUND) == []
    [stalled] = verdict.judge({0: beat(2, 0, "update"), 1: None}, 31.0, BOUND)
    assert stalled.rank == 1 and stalled.why == "silent" and stalled.beat is None
    assert "before its first beat" in describe(stalled, None)[0]


def test_beats_travel_as_json_and_garbage_is_no_beat() -> None:
    b = beat(3, 11, "data", step=5)
    assert Beat.from_json(b.to_json()) == b
    evaluating = beat(3, 11, "update", work="eval")
    assert Beat.from_json(evaluating.to_json()) == evaluating
    assert b.position == (11, 0) < beat(3, 11, "forward").position < beat(1, 12, "data").position
    assert Beat.from_json(b"not json") is None and Beat.from_json('{"beat": 1}') is None


def test_config_keys_and_their_ranges() -> None:
    cfg = load_preset("fashion-mini", ["alerts.stalled_rank_s=3", 'alerts.stalled_rank="stop"'])
    assert cfg.alerts.stalled_rank_s == 3 and cfg.alerts.stalled_rank == "stop"
    assert cfg.alerts.stalled_rank_factor == 10.0
    with pytest.raises(ConfigError, match="alerts.stalled_rank"):
        load_preset("fashion-mini", ['alerts.stalled_rank="pause"'])  # no step to pause at
    with pytest.raises(ConfigError, match="stalled_rank_s"):
        load_preset("fashion-mini", ["alerts.stalled_rank_s=0.5"])


def test_rank_0_names_the_rank_asks_every_rank_for_stacks_and_writes_its_own(
    tmp_path: Path,
) -> None:
    """Rank 0's watch over a real c10d store (a HashStore: the keys a TCPStore would hold);
    rank 1's heartbeat is written into it as rank 1's thread would, stuck in its forward."""
    store = dist.HashStore()
    alerts: list[tuple[str, dict[str, Any], int | None]] = []
    progress, control = Progress(), Control()
    control.step, progress.micro, progress.phase = 4, 5, "backward"
    watch = RankWatch(
        store, 0, 2, progress, control, stacks=RunDir(tmp_path).stacks, action="warn", floor_s=0.3,
        factor=10.0, raise_alert=lambda *a: alerts.append(a), leave=pytest.fail, may_leave=False,
    )  # fmt: skip
    watch.verdict = Verdict(2, time.monotonic())
    control.state = "running"
    for _ in range(5):  # the first step: rank 1 compiles at its own pace, and says so
        store.set("beat/1", beat(watch.beats, 5, "forward", work="compile").to_json())
        watch.tick()
        time.sleep(0.1)
    assert alerts == [] and store.check(["dump"]) is False
    deadline = time.monotonic() + 30
    while not alerts and time.monotonic() < deadline:
        store.set("beat/1", beat(watch.beats, 5, "forward").to_json())  # alive, not moving
        watch.tick()
        time.sleep(0.1)
    [(message, figures, step)] = alerts
    assert figures["rank"] == 1 and step == 5 and figures["waiting_ranks"] == [0]
    assert figures["stacks"] == str(tmp_path / "stacks") and figures["bound_s"] == 0.3
    assert store.get("dump") == b"1"  # every rank's watch answers it at its next tick
    watch.tick()  # rank 0's own answer
    text = (tmp_path / "stacks" / "rank-0.txt").read_text()
    assert text.startswith("rank 0 pid") and "step 4 phase backward" in text
    assert "test_rankwatch.py" in text  # the main thread's frames: this test
    assert store.get("dumped/0") == b"1"
    for _ in range(3):  # the same episode is not news again
        store.set("beat/1", beat(watch.beats, 5, "forward").to_json())
        watch.tick()
    assert len(alerts) == 1


def test_the_flight_recorder_env_fills_only_what_the_user_left_unset(tmp_path: Path) -> None:
    environ = {"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
    added = flight_recorder_env(environ, tmp_path / "stacks")
    assert added == {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "stacks" / "nccl-trace-rank-"),
    }
    assert environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"  # the user's choice stands
    newer = {"TORCH_FR_BUFFER_SIZE": "500", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/t_"}
    assert flight_recorder_env(newer, None) == {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}


def test_rank_0_reads_a_missing_heartbeat_as_none_without_waiting_for_it() -> None:
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=60))  # a blocking get on the missing key would hang
    watch = RankWatch(
        store, 0, 3, Progress(), Control(), stacks=None, action="warn", floor_s=30.0,
        factor=10.0, raise_alert=pytest.fail, leave=pytest.fail, may_leave=False,
    )  # fmt: skip
    watch.publish()
    store.set("beat/1", beat(7, 2, "data").to_json())
    assert watch.read_beats() == {0: Beat(1, 0, "update", 0, False, *watch.where),
                                  1: beat(7, 2, "data"), 2: None}  # fmt: skip
    store.set("beat/2", beat(1, 2, "data").to_json())  # now all: one multi_get
    assert watch.read_beats()[2] == beat(1, 2, "data")


def test_a_rank_saving_while_the_others_went_ahead_is_not_behind() -> None:
    """Rank 0 writing a long checkpoint (or a profile's trace) while rank 1 has begun the
    next micro-batch is its own work, not a stall: no `behind` verdict however long."""
    verdict = Verdict(2, 0.0)
    for t, n in ((0.0, 1), (40.0, 2), (80.0, 3)):
        beats = {0: Beat(n, 5, "update", 4, work="save"), 1: Beat(n, 6, "backward", 4)}
        assert verdict.judge(beats, t, 30.0) == []
    beats = {0: Beat(4, 5, "update", 4), 1: Beat(4, 6, "backward", 4)}  # then it stops there
    verdict.judge(beats, 100.0, 30.0)
    [stalled] = verdict.judge(
        {0: Beat(5, 5, "update", 4), 1: Beat(5, 6, "backward", 4)}, 131.0, 30.0
    )
    assert (stalled.rank, stalled.why) == (0, "behind")


@pytest.mark.parametrize("work", OWN_WORK)
def test_a_rank_in_its_own_long_work_is_never_behind_and_the_bound_counts_from_its_end(
    work: str,
) -> None:
    """Rank 1 evaluating (or compiling its first step, saving, profiling, writing a memory
    snapshot) far longer than rank 0, which went on into the next step and waits for it in
    the all-reduce: a healthy job, no verdict however long. Once the work is over and rank 1
    still does not move, the bound counts from then."""
    verdict = Verdict(2, 0.0)
    for t in range(0, 600, 10):
        beats = {0: beat(t, 9, "backward", step=3), 1: beat(t, 8, "update", step=3, work=work)}
        assert verdict.judge(beats, float(t), BOUND) == [], t
    for t in range(600, 640):
        beats = {0: beat(t, 9, "backward", step=3), 1: beat(t, 8, "update", step=3)}
        found = verdict.judge(beats, float(t), BOUND)
        assert found == [] if t < 630 else [s.rank for s in found] == [1], t
    message, figures, _ = describe(
        Stalled(1, "silent", 40.0, beat(1, 8, "update", work="eval")), None
    )
    assert "(in step 5, phase update, in its eval)" in message and figures["work"] == "eval"


def test_rank_0_evaluating_excuses_no_other_rank() -> None:
    """The excuse is each rank's own: rank 2 stuck in its data loader while rank 1 waits for
    it is behind even while rank 0 is still in its evaluation (its Control says so)."""
    store = dist.HashStore()
    alerts: list[tuple[str, dict[str, Any], int | None]] = []
    progress, control = Progress(), Control()
    control.state, control.step, progress.micro, progress.work = "evaluating", 4, 5, "eval"
    watch = RankWatch(
        store, 0, 3, progress, control, stacks=None, action="warn", floor_s=0.3,
        factor=10.0, raise_alert=lambda *a: alerts.append(a), leave=pytest.fail, may_leave=False,
    )  # fmt: skip
    watch.verdict = Verdict(3, time.monotonic())
    deadline = time.monotonic() + 30
    while not alerts and time.monotonic() < deadline:
        store.set("beat/1", beat(watch.beats, 6, "backward").to_json())
        store.set("beat/2", beat(watch.beats, 6, "data").to_json())
        watch.tick()
        time.sleep(0.1)
    [(_, figures, _)] = alerts
    assert figures["rank"] == 2 and figures["waiting_ranks"] == [1] and figures["work"] is None
