"""Diagnosis for item 1's data wait: the CPU device path's batch build under contention.

    python bench/data_threads.py --batches 40 --repeats 3 --hogs 2

On the CPU a batch of the device path (`DeviceSource.batches`: index_select of images and
labels, uint8 -> float32, mul_, add_) is four small intra-op-parallel ops. With every core
busy (another process, the UI thread, a test suite) each parallel region waits for a worker
thread to be scheduled, so the build costs milliseconds instead of microseconds, and it is
all counted as data wait. This compares, in interleaved blocks, the batch build as the
engine does it against the same build inside a one-thread scope
(`torch.set_num_threads(1)`, restored right after), against a float32 store normalised
once (one index_select per batch) and against a numpy build on the calling thread (gather
and float32 normalise, no intra-op parallel region; bitwise the engine's batches), with a
real training step (the seeds' CNN, AdamW) between builds, idle and with --hogs other torch
processes (2-thread matmuls) competing for the cores: a stand-in for a shared machine.
Prints ms per batch and the build's share of the wall time (what the engine reports as
data wait). The engine-level check of a candidate is `bench/reference.py --before-tree`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from _common import emit, machine, spread

from tuitrain.core.config import load_preset
from tuitrain.engine.data.build import build_data
from tuitrain.engine.data.fashion import FASHION_MEAN, FASHION_STD
from tuitrain.engine.models.vision import FashionCNN


def hog() -> None:  # runs in a child process until terminated
    """Another torch user on the machine: 2-thread matmuls, back to back."""
    torch.set_num_threads(2)
    a = torch.randn(512, 512)
    while True:
        a = torch.mm(a, a).clamp_(-1, 1)


def block(
    make: Callable[[], Iterator[Any]], step: Callable[[Any], None], batches: int, one_thread: bool
) -> tuple[float, float]:
    """(ms per batch build, build share of the wall time) over `batches` training steps."""
    threads = torch.get_num_threads()
    it = make()
    wait = 0.0
    t0 = time.perf_counter()
    for _ in range(batches):
        t = time.perf_counter()
        if one_thread:
            torch.set_num_threads(1)
            try:
                batch = next(it)
            finally:
                torch.set_num_threads(threads)
        else:
            batch = next(it)
        wait += time.perf_counter() - t
        step(batch)
    return 1e3 * wait / batches, wait / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="steps per block (<= 234)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes in the busy case")
    args = parser.parse_args()
    cfg = load_preset("fashion-fp32", ['train.device="cpu"'])
    source = build_data(cfg.data, torch.device("cpu"), seed=0).train

    model = FashionCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

    def make() -> Iterator[Any]:
        return iter(source.batches(0))

    # the alternative store: the split normalised once to float32 (4x the bytes), so a batch
    # is a single index_select (the labels' one is below the intra-op grain size)
    images = source._images.float().mul_(1 / (255 * FASHION_STD)).add_(-FASHION_MEAN / FASHION_STD)
    labels = source._labels

    def make_float() -> Iterator[Any]:
        order = source.indices(0)
        for b in range(len(source)):
            idx = order[b * 256 : (b + 1) * 256]
            yield images.index_select(0, idx), labels.index_select(0, idx)

    images_np, labels_np = source._images.numpy(), labels.numpy()
    scale, shift = np.float32(1 / (255 * FASHION_STD)), np.float32(-FASHION_MEAN / FASHION_STD)

    def make_numpy() -> Iterator[Any]:  # same float32 ops as the engine's normalise
        order = source.indices(0).numpy()
        for b in range(len(source)):
            idx = order[b * 256 : (b + 1) * 256]
            x = np.multiply(images_np.take(idx, axis=0), scale, dtype=np.float32)
            yield torch.from_numpy(np.add(x, shift, out=x)), torch.from_numpy(labels_np.take(idx))

    def step(batch: Any) -> None:  # the training step between two batch builds
        x, y = batch
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    block(make, step, 10, False)  # warm-up
    results: dict[str, list[float]] = {}
    for case in ("idle", "busy"):
        hogs = [
            mp.Process(target=hog, daemon=True) for _ in range(args.hogs if case == "busy" else 0)
        ]
        for p in hogs:
            p.start()
        try:
            modes = [
                ("as_engine", make, False),
                ("one_thread_scope", make, True),
                ("float32_store", make_float, False),
                ("numpy_build", make_numpy, False),
            ]
            for r in range(args.repeats):
                for name, maker, one in modes if r % 2 == 0 else modes[::-1]:
                    key = f"{case}_{name}"
                    ms, share = block(maker, step, args.batches, one)
                    results.setdefault(f"{key}_ms_per_batch", []).append(ms)
                    results.setdefault(f"{key}_data_wait_pct", []).append(100 * share)
        finally:
            for p in hogs:
                p.terminate()
                p.join()
    emit(
        {
            "item": "diagnosis: CPU batch build under contention (item 1 data wait)",
            "machine": machine(),
            "command": " ".join(["python bench/data_threads.py", *sys.argv[1:]]),
            "torch_threads": torch.get_num_threads(),
            "hogs_in_busy_case": args.hogs,
            **{key: spread(values, 3) for key, values in results.items()},
        }
    )


if __name__ == "__main__":
    main()
