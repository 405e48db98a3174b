"""Time in collectives (engine/comm.py): the interval arithmetic, the clock's reading per
DDP iteration, and DDP's timed all-reduce on a real (one-rank, gloo) process group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tuitrain.engine.comm import CommClock, exposed_seconds, union_seconds


def test_union_counts_overlapping_spans_once() -> None:
    assert union_seconds([]) == 0.0
    assert union_seconds([(0.0, 1.0)]) == 1.0
    assert union_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == pytest.approx(3.0)
    assert union_seconds([(0.0, 4.0), (1.0, 2.0)]) == pytest.approx(4.0)  # one inside another
    assert union_seconds([(3.0, 4.0), (0.0, 1.0), (1.0, 2.0)]) == pytest.approx(3.0)  # unsorted


def test_exposed_is_the_union_after_the_compute() -> None:
    spans = [(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]
    assert exposed_seconds(spans, 1.5) == pytest.approx(1.5)  # 1.5-2 and 3-4
    assert exposed_seconds(spans, 5.0) == 0.0  # everything hidden behind compute
    assert exposed_seconds(spans, -1.0) == pytest.approx(union_seconds(spans))


def test_clock_reads_per_iteration_and_resets() -> None:
    """Spans marked by hand: two DDP iterations, each closed by its last bucket; the
    exposed part of each is counted from that bucket's call."""
    clock = CommClock(torch.device("cpu"))
    clock.exposed = True
    times = iter([0.0, 2.0, 1.0, 3.0, 10.0, 11.0, 10.5, 14.0])
    clock.now = lambda: next(times)  # type: ignore[method-assign]
    a = clock.begin()  # 0: first bucket of step 0
    b = clock.begin(last=True)  # 2: the backward ended here
    clock.end(a)  # 1
    clock.end(b)  # 3
    c = clock.begin(last=True)  # 10: step 1 has one bucket
    clock.end(c)  # 11
    open_span = clock.begin()  # 10.5, never ended: left out
    comm, exposed = clock.read()
    assert comm == pytest.approx(3.0)  # 0-1, 2-3, 10-11
    assert exposed == pytest.approx(1.0 + 1.0)  # 2-3 and 10-11: each after its last call
    assert open_span[1] is None
    assert clock.read() == (0.0, 0.0)  # read resets
    clock.exposed = False  # FSDP: not measured
    assert clock.read()[1] is None


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    # a group left up by another test would be that test's bug: say so, never skip
    assert not dist.is_initialized(), "a test left a process group up in this process"
    store = f"file://{tmp_path / 'store'}"
    dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_hook_times_the_all_reduce_and_keeps_the_gradients(one_rank_group: None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    timed = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    timed.load_state_dict(plain.state_dict())
    clock = CommClock(torch.device("cpu"))
    ddp_plain = DistributedDataParallel(plain)
    ddp_timed = DistributedDataParallel(timed, bucket_cap_mb=0.0001)  # several buckets
    clock.attach_ddp(ddp_timed)
    x = torch.randn(4, 8)
    for _ in range(3):
        ddp_plain(x).square().sum().backward()
        ddp_timed(x).square().sum().backward()
    for p, q in zip(plain.parameters(), timed.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)  # the default all-reduce: the same arithmetic
    assert clock._step == 3  # one iteration closed per backward (its last bucket)
    comm, exposed = clock.read()
    assert comm > 0 and exposed is not None and 0 <= exposed <= comm
