"""The host allocator, set for training: glibc's malloc keeps the memory a step frees.

A training step allocates and frees the same tensors every step. With glibc's defaults a tensor
over the mmap threshold (128 KiB, rising to what was last freed) is mapped and unmapped each
time, and freed memory above the trim threshold goes back to the kernel: the next step takes it
again one page fault at a time, each page zeroed. charlm-mini on a 2-core CPU took 2,000-5,000
page faults a step in some processes, none in others (up to 20% of a step, BENCHMARKS.md §
Performance against nanoGPT, second look); with `retain`, none after the first steps. What
`retain` sets is what glibc's own dynamic threshold would reach at most (32 MiB, its ceiling),
from the start, and a trim threshold of 1 GiB: freed memory stays in the process, so its
resident size stays at its peak (what PyTorch's CUDA caching allocator does for the GPU).
`system` leaves the C library's defaults.

Process-wide: the first run of a process sets it, a later run asking for `system` puts glibc's
static defaults back (its dynamic threshold cannot be restored). Not glibc (musl, macOS,
Windows), or a malloc other than glibc's (jemalloc, tcmalloc by LD_PRELOAD): nothing is set and
the run reports `system`.

`frozen_heap()`, around the training loop: Python's cyclic garbage collector leaves out what
exists when training starts (`gc.freeze()`): torch's, Textual's and every imported module's
objects, the model, the optimizer; `gc.unfreeze()` when the loop ends. A full collection
otherwise walks all of them (about 350,000 objects with the dashboard: 140-200 ms here,
holding the GIL, so the training thread's next Python line waits too), and the dashboard's
allocations set one off every minute or so (BENCHMARKS.md § Performance against nanoGPT, third
look). Objects made during the loop are collected as before; garbage cycles among the frozen
ones wait for the unfreeze.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import sys
import threading
from collections.abc import Iterator

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "frozen_heap", "glibc", "set_host_malloc"]

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for it (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 1 << 30
DEFAULT_THRESHOLD = 128 << 10  # glibc's static default for both

_lock = threading.Lock()
_state = "system"  # what this process's malloc is set to now
_loops = 0  # training loops running in this process inside frozen_heap
_ours = True  # whether the running loops' freeze is ours to undo


def glibc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc and its malloc is glibc's (the one whose
    mallopt this knows), else None: jemalloc or tcmalloc put in by LD_PRELOAD (common in
    PyTorch images) take malloc, and glibc's mallopt would change nothing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        process = ctypes.CDLL(None)
        version = process.gnu_get_libc_version  # glibc only: musl has no such symbol
        libc = ctypes.CDLL("libc.so.6")
        ours, theirs = (
            ctypes.cast(process.malloc, ctypes.c_void_p),
            ctypes.cast(libc.malloc, ctypes.c_void_p),
        )
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    if not version() or ours.value != theirs.value:
        return None
    return libc


def set_host_malloc(mode: str) -> str:
    """Set the process's malloc for `mode` ("retain" or "system"); returns what is in effect."""
    global _state
    if mode not in ("retain", "system"):
        raise ValueError(f"host_malloc must be retain or system, not {mode!r}")
    with _lock:
        if mode == _state:
            return _state
        libc = glibc()
        if libc is None:
            return _state  # "system": nothing to set
        mmap, trim = (
            (MMAP_THRESHOLD, TRIM_THRESHOLD)
            if mode == "retain"
            else (DEFAULT_THRESHOLD, DEFAULT_THRESHOLD)
        )
        # mallopt returns 1 on success; a value it refuses leaves the setting as it was
        if not libc.mallopt(M_MMAP_THRESHOLD, mmap):
            return _state
        if not libc.mallopt(M_TRIM_THRESHOLD, trim):  # never half set: put the first back
            libc.mallopt(
                M_MMAP_THRESHOLD, MMAP_THRESHOLD if _state == "retain" else DEFAULT_THRESHOLD
            )
            return _state
        _state = mode
        return _state


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive now out of Python's garbage collections while the block runs.

    The first block to enter freezes, the last one out unfreezes, unless the heap was already
    frozen when the first came in (an embedding program's own `gc.freeze()`: left as it was).
    No collection first: it would cost every run start a full one (about 140 ms on a 2-core
    CPU with torch and Textual loaded); garbage of the moment (a few dozen objects after a
    run, no tensors) waits for the unfreeze. Blocks overlap only when runs share a process's
    threads: none of tuitrain's do today (the parity check runs its two one after the other),
    a program calling the engine from two threads could."""
    global _loops, _ours
    with _lock:
        if _loops == 0:
            _ours = gc.get_freeze_count() == 0
            gc.freeze()
        _loops += 1
    try:
        yield
    finally:
        with _lock:
            _loops -= 1
            if _loops == 0 and _ours:
                gc.unfreeze()
