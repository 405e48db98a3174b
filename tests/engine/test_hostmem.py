"""The host allocator a run sets (engine/hostmem.py): glibc keeps what a step frees; Python's
garbage collector leaves out what exists when the training loop starts."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref

import pytest

from tests.engine.test_trainer import ListSink
from tuitrain.engine.hostmem import frozen_heap, glibc, set_host_malloc
from tuitrain.engine.runner import run

# A small MLP's forward and backward, 60 times: the page faults of the last 40 (the first ones
# fill the heap the first time, with or without `retain`).
FAULTS = textwrap.dedent(
    """
    import ctypes, resource, sys
    # transparent huge pages (always on some distributions) count a fault per 2 MiB: off here
    ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
    from tuitrain.engine.hostmem import set_host_malloc
    assert set_host_malloc(sys.argv[1]) == sys.argv[1]
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
    x = torch.randn(4096, 128)
    faults = []
    for _ in range(60):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        m(x).square().mean().backward()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(sum(faults[20:]))
    """
)


def faults(mode: str) -> int:
    # glibc's own settings from the environment would make "system" something else
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUN"))}
    env.pop("LD_PRELOAD", None)
    done = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(glibc() is None, reason="mallopt is glibc's (Linux)")
def test_retain_stops_the_page_faults_that_glibc_takes_every_step() -> None:
    system, retain = faults("system"), faults("retain")
    # glibc's defaults hand freed memory back and fault it in again: thousands of pages a step
    # (8 MiB activations); retained, only the heap's rare growth faults
    assert system > 10_000, system
    assert retain * 5 < system, (retain, system)


def test_the_header_says_which_allocator_the_run_had(tiny_config) -> None:  # noqa: ANN001
    expected = "retain" if glibc() is not None else "system"
    for mode, want in (("retain", expected), ("system", "system"), ("retain", expected)):
        sink = ListSink()
        cfg = tiny_config("train.max_steps=1", f'train.host_malloc="{mode}"')
        assert run(cfg, sink).status == "completed"
        (header,) = sink.of("header")
        assert header["host_malloc"] == want


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="retain or system"):
        set_host_malloc("jemalloc")


class Cycle:
    """An object in a reference cycle: only the garbage collector can free it."""

    def __init__(self) -> None:
        self.me = self


class FreezeSink(ListSink):
    """At each train record: how many objects the collector leaves out (frozen); at the first,
    drops `held` (a cycle alive when the loop started) and makes a new cycle, collects, and
    notes which of the two the collection freed."""

    def __init__(self, held: list[Cycle]) -> None:
        super().__init__()
        self.held = held
        self.frozen: list[int] = []
        self.freed: dict[str, bool] = {}

    def write(self, record: dict) -> None:
        if record.get("type") == "train":
            self.frozen.append(gc.get_freeze_count())
            if not self.freed:
                old = weakref.ref(self.held[0])
                self.held.clear()
                new = weakref.ref(Cycle())
                gc.collect()
                self.freed = {"from_before": old() is None, "made_in_loop": new() is None}
        super().write(record)


def test_the_training_loop_runs_with_the_heap_frozen_and_unfreezes_after(tiny_config) -> None:  # noqa: ANN001
    before = gc.get_freeze_count()
    held = [Cycle()]  # alive when the loop starts: frozen with torch's objects and the model's
    dropped = weakref.ref(held[0])
    sink = FreezeSink(held)
    cfg = tiny_config("train.max_steps=4", "train.log_every=1")
    assert run(cfg, sink).status == "completed"
    # every logged step ran with the process's objects left out of the collections
    assert len(sink.frozen) == 4 and min(sink.frozen) > 10_000, sink.frozen
    # a cycle dropped during the loop waits; one made in the loop is collected as before
    assert sink.freed == {"from_before": False, "made_in_loop": True}
    assert dropped() is not None
    assert gc.get_freeze_count() == before  # all back in the oldest generation...
    gc.collect()
    assert dropped() is None  # ...where the next collection frees it


def test_a_run_that_fails_in_its_loop_unfreezes_too(tiny_config) -> None:  # noqa: ANN001
    before = gc.get_freeze_count()
    sink = FreezeSink([Cycle()])  # the model raises in its first evaluation, after 2 steps
    cfg = tiny_config("model.name=tests.engine.models_for_tests:raise_in_eval", "train.log_every=1")
    result = run(cfg, sink)
    assert result.status == "failed" and result.step == 2
    assert sink.frozen and min(sink.frozen) > 10_000  # it failed inside the frozen loop
    assert gc.get_freeze_count() == before


def test_overlapping_loops_unfreeze_when_the_last_one_ends() -> None:
    # Counts can only fall by what other threads free meanwhile (a daemon thread of an
    # earlier test in this process): a second freeze or an early unfreeze moves whole heaps.
    before = gc.get_freeze_count()
    with frozen_heap():
        first = gc.get_freeze_count()
        assert first > before + 1000
        kept = [[i] for i in range(5000)]  # tracked objects a second freeze would take
        with frozen_heap():  # a second loop while the first runs: no second freeze
            assert first - 100 <= gc.get_freeze_count() <= first
        assert gc.get_freeze_count() > first - 100  # the first loop is still running
    assert gc.get_freeze_count() <= before
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("the loop failed")
    assert gc.get_freeze_count() <= before
    del kept


def test_a_heap_frozen_before_the_loop_stays_frozen_after_it() -> None:
    gc.freeze()  # the embedding program's own freeze
    try:
        theirs = gc.get_freeze_count()
        with frozen_heap():
            assert gc.get_freeze_count() >= theirs
        assert gc.get_freeze_count() >= theirs  # not undone by the loop's end
    finally:
        gc.unfreeze()
