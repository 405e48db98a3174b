"""Pick the one device that the model, the inputs and the targets all live on."""

from __future__ import annotations

import torch

from tuitrain.errors import UserError


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """auto = cuda, then mps, then cpu; an explicit device that is absent is a usage error."""
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError(
                "--device cuda was asked for but CUDA is not available here "
                "(no GPU or a CPU-only torch); use --device cpu or --device auto."
            )
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("--device mps was asked for but MPS is not available; use --device auto.")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return f"CPU ({torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads)"


def bf16_supported(device: torch.device) -> bool:
    """True where bf16 autocast is real and fast: Ampere+ GPUs, CPUs with AVX512-BF16/AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def synchronize(device: torch.device) -> None:
    """A host-device sync point: only called at the log cadence and around timed sections."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
