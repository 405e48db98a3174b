"""Precision modes as small classes with no-op defaults (Lightning Fabric's shape).

fp32: nothing. bf16: autocast, no scaler (bf16 has fp32's exponent range). fp16: autocast
plus a GradScaler that scales the loss so small gradients survive, unscales before clipping,
skips steps whose gradients overflowed and adapts its scale. Under FSDP each rank holds only
its shard of the gradients, so the scaler is FSDP's ShardedGradScaler: it all-reduces the
inf/NaN flag, and a step that overflowed on any rank's shard is skipped on every rank (the
ranks' weights never part).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager

import torch

from tuitrain.engine.device import bf16_supported, device_name


class Precision:
    """fp32: every hook is a no-op."""

    name = "fp32"
    dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def autocast(self) -> ContextManager[object]:
        return contextlib.nullcontext()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def scale_tensor(self) -> torch.Tensor | None:
        """The scaler's scale as a device tensor (read it on the host only at log points)."""
        return None

    def start_warning(self) -> tuple[str, str] | None:
        """(message, hint) worth a warning event at run start, or None."""
        return None


class BF16Precision(Precision):
    name = "bf16"
    dtype = torch.bfloat16

    def autocast(self) -> ContextManager[object]:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def start_warning(self) -> tuple[str, str] | None:
        """bf16 asked for where it is emulated: it runs, slowly, and the run says so."""
        if self.device.type not in ("cuda", "cpu") or bf16_supported(self.device):
            return None
        if self.device.type == "cuda":
            return (
                f"bf16 on {device_name(self.device)} is emulated: bf16 tensor cores start "
                "with Ampere (sm_80), so it runs slower than fp16 here",
                "use --precision fp16 (with its GradScaler) on this GPU",
            )
        capability = torch.backends.cpu.get_cpu_capability()
        return (
            f"bf16 on this CPU ({capability}) is emulated: it has no AVX512-BF16 or AMX, so "
            "bf16 autocast runs ~7x slower than fp32 (measured: 267 against 1,856 samples/s)",
            "use --precision fp32 on this CPU",
        )


class FP16Precision(Precision):
    name = "fp16"
    dtype = torch.float16
    scaler: torch.amp.GradScaler  # always set in __init__: never None here

    def __init__(self, device: torch.device, sharded: bool = False) -> None:
        super().__init__(device)
        if sharded:  # FSDP: the inf/NaN check agreed over the ranks' gradient shards
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            self.scaler = ShardedGradScaler(device.type)
        else:
            self.scaler = torch.amp.GradScaler(device.type)
        self._unscaled = False

    def autocast(self) -> ContextManager[object]:
        return torch.autocast(device_type=self.device.type, dtype=torch.float16)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        # scaler.step skips optimizer.step() when the gradients hold inf/NaN; update() then
        # halves the scale (or grows it after enough clean steps).
        self.scaler.step(optimizer)
        self.scaler.update()

    def scale_tensor(self) -> torch.Tensor | None:
        return self.scaler._scale  # device tensor: reading it is deferred to log points

    def start_warning(self) -> tuple[str, str] | None:
        """A warning, not a refusal: fp16 on a CPU works (tests use it), it is only slow."""
        if self.device.type != "cpu" or cpu_fp16_native() is not False:
            return None
        capability = torch.backends.cpu.get_cpu_capability()
        message = (
            f"fp16 on this CPU ({capability}) is emulated: it has no native fp16 kernels "
            "(AVX512-FP16 or AMX-FP16), so convolutions run reference code, ~10x slower "
            "than fp32"
        )
        fast = "bf16" if bf16_supported(self.device) else "fp32"
        return message, f"use --precision {fast} on this CPU"


def cpu_fp16_native() -> bool | None:
    """True where oneDNN has fp16 kernels on this CPU (AVX512-FP16 or AMX-FP16), None when
    this torch cannot say. Without them fp16 autocast falls back to slow reference kernels
    (BENCHMARKS.md, item 2: aten::_slow_conv2d_* took 89% of an fp16 step)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):  # a torch without the check
        return None


def resolve_precision(name: str, device: torch.device) -> str:
    """auto = bf16 where it is native (Ampere+ GPUs, CPUs with AVX512-BF16/AMX), else fp16 on
    CUDA, else fp32. An explicit bf16 or fp16 always runs; where it is emulated the run
    starts with a warning event (`Precision.start_warning`)."""
    if name == "auto":
        if bf16_supported(device):
            return "bf16"
        return "fp16" if device.type == "cuda" else "fp32"
    return name


PRECISIONS: dict[str, type[Precision]] = {
    "fp32": Precision,
    "bf16": BF16Precision,
    "fp16": FP16Precision,
}


def make_precision(name: str, device: torch.device, sharded: bool = False) -> Precision:
    """The run's precision; `sharded`: the gradients are sharded over ranks (FSDP), so
    fp16's scaler must agree over them."""
    resolved = resolve_precision(name, device)
    if resolved == "fp16":
        return FP16Precision(device, sharded=sharded)
    return PRECISIONS[resolved](device)
