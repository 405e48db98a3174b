"""FLOPs per training sample, counted once at start, and the device's peak, for TFLOP/s and MFU.

`flops_per_sample` is what `torch.utils.flop_counter.FlopCounterMode` counts over one
forward + backward of the task's training_step on the first validation batch, on the plain
module (not the compiled or DDP wrapper), divided by the batch's size (the dry step in
engine/setup.py, the same for every task): matmuls and convolutions (2 x multiply-adds), the
FLOPs MFU is defined over; elementwise work, pooling, the loss and the optimizer update are
not counted. The count runs in eval mode and leaves the run as it was: RNG states, gradients
and buffers (batch-norm statistics) are put back, so exact resume and the first step do not
change.

`peak_tflops` is a dense (no sparsity) peak from NVIDIA's datasheets for the run's device and
dtype, or a short matmul probe on the run's device when asked (`--measure-peak`); CPUs have
no table entry: MFU is null there unless measured.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

__all__ = [
    "Peak",
    "count_flops",
    "count_flops_per_sample",
    "left_as_it_was",
    "measure_peak",
    "peak_dtype",
    "per_sample",
    "table_peak",
]

T = TypeVar("T")

# Dense peak TFLOP/s per dtype ("tf32": fp32 matmuls on tensor cores), from NVIDIA's
# datasheets (H100/H200, A100, L40S, L40, L4, A10, RTX A6000, V100, T4) and the Ampere GA102
# and Ada AD102 whitepapers (GeForce RTX 30/40: FP16/BF16 tensor with FP32 accumulate).
# The datasheets print sparse figures with an asterisk; these are half of those. SXM parts
# where the name does not say PCIe/NVL. First match wins: longer names first.
PEAK_TABLE: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"H100 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2}),
    (r"H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    (r"L40\b", {"bf16": 181.0, "fp16": 181.0, "tf32": 90.5, "fp32": 90.5}),
    (r"L4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"A10\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"RTX A6000", {"bf16": 154.8, "fp16": 154.8, "tf32": 77.4, "fp32": 38.7}),
    (r"RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"RTX 4080", {"bf16": 97.5, "fp16": 97.5, "tf32": 48.7, "fp32": 48.7}),
    (r"RTX 3090", {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6}),
    (r"RTX 3080", {"bf16": 59.5, "fp16": 59.5, "tf32": 29.8, "fp32": 29.8}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),
    (r"\bT4\b", {"fp16": 65.0, "fp32": 8.1}),
)


@dataclass(frozen=True, slots=True)
class Peak:
    """The peak TFLOP/s MFU divides by (None: unknown) and where it comes from."""

    tflops: float | None
    source: str


def peak_dtype(precision: str, tf32: bool) -> str:
    """The table's dtype key for a run: bf16, fp16, tf32 (fp32 on tensor cores) or fp32."""
    if precision in ("bf16", "fp16"):
        return precision
    return "tf32" if tf32 else "fp32"


def table_peak(device: torch.device, name: str, dtype: str) -> Peak:
    """The datasheet's dense peak for a CUDA device name and dtype, if the table has it."""
    if device.type != "cuda":
        return Peak(None, f"none known for {device.type} (--measure-peak measures one)")
    for pattern, peaks in PEAK_TABLE:
        if re.search(pattern, name) and dtype in peaks:
            return Peak(peaks[dtype], f"table: {pattern.strip(chr(92) + 'b')} {dtype} dense")
    return Peak(None, f"none known for {name} {dtype} (--measure-peak measures one)")


def measure_peak(device: torch.device, dtype: str, seconds: float = 0.5) -> Peak:
    """A short matmul probe: the best rate of N x N matmuls in the run's dtype over about
    `seconds`. No RNG is drawn (the operands are constant; the values do not change speed)."""
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    n = 4096 if device.type == "cuda" else 1024
    a = torch.full((n, n), 0.5, device=device, dtype=torch_dtype)
    b = torch.full((n, n), 0.25, device=device, dtype=torch_dtype)
    flops = 2.0 * n**3
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.mm(a, b)  # warm-up: kernel choice, thread pool
    sync()
    best, reps, started = 0.0, 1, time.perf_counter()
    while time.perf_counter() - started < seconds:
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        sync()
        elapsed = max(time.perf_counter() - t0, 1e-9)
        best = max(best, flops * reps / elapsed / 1e12)
        if elapsed < 0.02:
            reps *= 2  # time batches long enough for the clock
    return Peak(best, f"measured (matmul probe {n}x{n} {dtype}, {seconds:g} s)")


@contextlib.contextmanager
def left_as_it_was(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Eval mode inside (no dropout draws, no batch-norm update); afterwards the RNG states
    (CPU, and this CUDA device), the gradients, the buffers and the mode as they were, so
    exact resume and the first step do not change."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    grads = {p: p.grad for p in model.parameters()}
    cuda = [device] if device.type == "cuda" else []
    training = model.training
    try:
        with torch.random.fork_rng(devices=cuda):
            model.eval()
            yield
    finally:
        model.train(training)
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        for p, g in grads.items():
            p.grad = g


def count_flops(fn: Callable[[], T]) -> tuple[T, int]:
    """`fn()` under FlopCounterMode: what it returns and the FLOPs it ran."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = fn()
    return out, counter.get_total_flops()


def per_sample(total: float, batch_size: int) -> float | None:
    return total / batch_size if total > 0 else None


def count_flops_per_sample(
    model: nn.Module,
    loss: Callable[[nn.Module], torch.Tensor],
    batch_size: int,
    device: torch.device,
) -> float | None:
    """Forward + backward FLOPs of one training sample, or None when the count fails.

    `loss(model)` on a batch of `batch_size` items (a task's training step), and its
    backward, under FlopCounterMode in eval mode (the same matmuls and convolutions as
    training, no dropout draws, no batch-norm update) with the run left as it was
    (`left_as_it_was`). The engine's own count is the dry step's (engine/setup.py), which
    counts the same way on the task's training_step."""

    def step() -> None:
        value = loss(model)
        if value.requires_grad:
            value.backward()

    try:
        with left_as_it_was(model, device):
            _, total = count_flops(step)
    except Exception:  # an exotic model the counter cannot follow: no TFLOP/s, not a failure
        return None
    return per_sample(total, batch_size)
