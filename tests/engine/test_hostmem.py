"""The host allocator a run sets (engine/hostmem.py): glibc keeps what a step frees; Python's
garbage collector leaves out what exists when the training loop starts."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

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


class FreezeSink(ListSink):
    """Notes, with each train record, how many objects the collector leaves out (frozen)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: list[int] = []

    def write(self, record: dict) -> None:
        if record.get("type") == "train":
            self.frozen.append(gc.get_freeze_count())
        super().write(record)


def test_the_training_loop_runs_with_the_heap_frozen_and_unfreezes_after(tiny_config) -> None:  # noqa: ANN001
    assert gc.get_freeze_count() == 0
    built_before = object()  # an object that exists before the run: frozen with the rest
    sink = FreezeSink()
    cfg = tiny_config("train.max_steps=4", "train.log_every=1")
    assert run(cfg, sink).status == "completed"
    # every step logged ran with torch's, the model's and this test's objects left out
    assert len(sink.frozen) == 4 and min(sink.frozen) > 10_000, sink.frozen
    assert gc.get_freeze_count() == 0  # all back in the oldest generation
    assert gc.is_tracked([built_before])  # (the collector still sees new containers)


def test_a_run_that_fails_in_its_loop_unfreezes_too(tiny_config) -> None:  # noqa: ANN001
    sink = FreezeSink()  # the model raises in its first evaluation, after the epoch's 2 steps
    cfg = tiny_config("model.name=tests.engine.models_for_tests:raise_in_eval", "train.log_every=1")
    result = run(cfg, sink)
    assert result.status == "failed" and result.step == 2
    assert sink.frozen and min(sink.frozen) > 10_000  # it failed inside the frozen loop
    assert gc.get_freeze_count() == 0


def test_overlapping_loops_unfreeze_when_the_last_one_ends() -> None:
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        first = gc.get_freeze_count()
        assert first > 0
        with frozen_heap():  # a second loop (the parity check's two runs): no second freeze
            assert gc.get_freeze_count() == first
        assert gc.get_freeze_count() == first  # the first loop is still running
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("the loop failed")
    assert gc.get_freeze_count() == 0
