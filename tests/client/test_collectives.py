"""A script's time in collectives (tuitrain.client.collectives): the clock's arithmetic on
spans, its hooks on a real gloo process group, and the per-rank `busy_s` that reaches rank
0's run; under torchrun, a rank slower outside its collectives is named the straggler."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tuitrain.client import ranks
from tuitrain.client.collectives import MAX_SPANS, CollectiveClock

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "rank_1_straggles.py")


def clock_with(spans: list[list[float | None]], since: float = 0.0) -> CollectiveClock:
    clock = CollectiveClock()
    clock.since, clock.spans = since, spans
    return clock


def test_the_union_of_spans_within_an_interval_is_the_time_in_collectives() -> None:
    # DDP's buckets overlap (1-3, 2-4: 3 s once); a span across the start counts from it;
    # one still in flight counts up to the interval's end
    clock = clock_with([[0.5, 1.5], [1.0, 3.0], [2.0, 4.0], [8.0, 9.0], [9.5, None]])
    assert clock.seconds(1.0, 10.0) == pytest.approx(3.0 + 1.0 + 0.5)
    # 9 s over 3 steps, 4.5 of them in collectives: 1.5 s a step outside
    assert clock.busy((4, 1.0), (7, 10.0)) == pytest.approx(1.5)
    assert clock.busy((7, 10.0), (7, 10.0)) is None  # no step between: no figure
    clock.release(4.0)  # the spans over by 4.0 go; the one in flight stays
    assert clock.spans == [[8.0, 9.0], [9.5, None]]


def test_no_figure_where_the_interval_cannot_be_told() -> None:
    assert CollectiveClock().seconds(1.0, 2.0) is None  # no hooks (no process group)
    assert clock_with([], since=5.0).seconds(1.0, 9.0) is None  # hooks on after its start
    untimed = clock_with([])
    untimed.untimed = True  # a group on NCCL: its waits are not the host's to see
    assert untimed.seconds(1.0, 2.0) is None
    lost = clock_with([[2.0, 3.0]])
    lost.lost_until = 2.5  # spans were let go: more than MAX_SPANS between two reports
    assert lost.seconds(1.0, 9.0) is None and lost.seconds(3.0, 9.0) == 0.0


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    assert not dist.is_initialized(), "a test left a process group up in this process"
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_full_span_list_drops_its_older_half_and_says_so(one_rank_group: None) -> None:
    clock = CollectiveClock()
    clock.poll()
    clock.spans.extend([[1.0, 1.5]] * MAX_SPANS)
    start = time.perf_counter()
    dist.barrier()
    assert len(clock.spans) == MAX_SPANS // 2 + 1 and clock.lost_until >= start
    clock.detach()


def test_the_hooks_time_a_real_groups_collectives_and_come_off_at_detach(
    one_rank_group: None,
) -> None:
    clock = CollectiveClock()
    clock.poll()
    assert clock.since is not None and not clock.untimed
    start = time.perf_counter()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    model(torch.randn(4, 8)).sum().backward()  # DDP's gradient all-reduce (async)
    dist.all_reduce(torch.ones(3))  # the script's own
    dist.barrier()
    end = time.perf_counter()
    assert len(clock.spans) >= 3 and all(s[1] is not None for s in clock.spans)
    comm = clock.seconds(start, end)
    assert comm is not None and 0 < comm <= end - start
    other = dist.new_group([0])  # a group made later: hooked at the next poll
    clock.poll()
    before = len(clock.spans)
    dist.all_reduce(torch.ones(1), group=other)
    assert len(clock.spans) == before + 1
    clock.detach()
    assert clock.since is None and clock.spans == []
    dist.all_reduce(torch.ones(1))
    assert clock.spans == []  # the hooks are off
    clock.poll()  # a later run hooks the groups again (the ids are free)
    dist.all_reduce(torch.ones(1))
    assert len(clock.spans) == 1
    clock.detach()


def test_the_other_ranks_busy_s_reaches_rank_0s_lists(tmp_path: Path) -> None:
    reader = ranks.RankReader(tmp_path, 3)
    with (tmp_path / "rank-1.jsonl").open("w") as f:
        f.write(json.dumps({"step": 4, "step_time_s": 0.5, "busy_s": 0.4}) + "\n")
    with (tmp_path / "rank-2.jsonl").open("w") as f:
        f.write(json.dumps({"step": 4, "step_time_s": 0.5, "busy_s": None}) + "\n")
    lists = reader.lists(4, {"step_time_s": 0.5, "busy_s": 0.1})
    assert lists is not None and lists["rank_busy_s"][:2] == [0.1, 0.4]
    assert math.isnan(lists["rank_busy_s"][2])  # rank 2's collectives were not timed
    quiet = ranks.RankReader(tmp_path, 2)
    (tmp_path / "rank-1.jsonl").write_text(json.dumps({"step": 4, "step_time_s": 0.5}) + "\n")
    lists = quiet.lists(4, {"step_time_s": 0.5})
    assert lists is not None and "rank_busy_s" not in lists  # no rank timed: no field


@pytest.mark.slow
def test_a_rank_slower_outside_its_collectives_is_named_the_straggler(tmp_path: Path) -> None:
    """Rank 1 sleeps 30 ms a step before its forward; DDP's all-reduce and the script's own
    make rank 0 wait for it, so both ranks' step times are alike. Rank 0's run names rank 1
    with the engine's field and alert."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("TUITRAIN_RUN_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         SCRIPT, str(tmp_path / "run")],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    recs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    timed = [r for r in recs if r["type"] == "train" and "rank_busy_s" in r]
    assert timed, recs[-3:]
    busy = [r["rank_busy_s"] for r in timed if None not in r["rank_busy_s"]]
    assert busy and all(b[1] >= 0.03 for b in busy), busy  # at least its sleep, a step
    assert all(b[1] > b[0] for b in busy), busy
    alerts = [r for r in recs if r.get("kind") == "alert" and r["alert"] == "straggler"]
    assert [a["rank"] for a in alerts] == [1], alerts  # once: one episode
    assert "time outside collectives" in alerts[0]["message"]
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
