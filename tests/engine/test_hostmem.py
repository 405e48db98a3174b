"""The host allocator a run sets (engine/hostmem.py): glibc keeps what a step frees."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.engine.test_trainer import ListSink
from tuitrain.engine.hostmem import glibc, set_host_malloc
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
