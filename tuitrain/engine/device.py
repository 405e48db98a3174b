"""Pick the one device that the model, the inputs and the targets all live on."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from tuitrain.core.errors import UserError


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """auto = cuda, then mps, then cpu; an explicit device that is absent is a usage error.
    Under DDP each local rank gets its own GPU: more local ranks than GPUs is a usage error
    (two ranks on one GPU make NCCL refuse the group, which reads as a lost rank)."""
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            cause = unusable_gpu(cuda_available=False)
            why = f"{cause[0]}; {cause[1]}" if cause else "no GPU or a CPU-only torch"
            raise UserError(
                f"--device cuda was asked for but CUDA is not available here ({why}); "
                "use --device cpu or --device auto."
            )
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise UserError(too_many_ranks(local_rank + 1, count))
        return torch.device("cuda", local_rank)
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("--device mps was asked for but MPS is not available; use --device auto.")
    return torch.device(name)


def too_many_ranks(ranks: int, gpus: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    return (
        f"{ranks} ranks on this node need {ranks} GPUs but {gpus} are visible{where}; "
        f"use --nproc {gpus} (or fewer), or --device cpu."
    )


def check_nproc(nproc: int, device: str) -> None:
    """`--nproc N` on a CUDA run: one GPU per rank, refused before any rank starts."""
    if device in ("cpu", "mps") or (device == "auto" and not torch.cuda.is_available()):
        return
    resolve_device("cuda")  # an explicit cuda without CUDA: the same sentence, before any rank
    gpus = torch.cuda.device_count()
    if nproc > gpus:
        raise UserError(too_many_ranks(nproc, gpus))


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return f"CPU ({torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads)"


def cuda_bf16_native(device: torch.device) -> bool:
    """bf16 tensor cores (Ampere, sm_80, and newer). `torch.cuda.is_bf16_supported()` alone
    also says True on a T4 or V100, where bf16 is emulated and slower than fp16."""
    try:
        with torch.cuda.device(device):
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # a torch without the keyword
        return torch.cuda.get_device_capability(device) >= (8, 0)


def bf16_supported(device: torch.device) -> bool:
    """True where bf16 autocast is real and fast: Ampere+ GPUs, CPUs with AVX512-BF16/AMX."""
    if device.type == "cuda":
        return cuda_bf16_native(device)
    if device.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def tf32_active(device: torch.device) -> bool:
    """fp32 matmuls and convolutions run as TF32 (10-bit mantissa) on this device: Ampere+
    with `torch.backends.cuda.matmul.allow_tf32` (set from `train.tf32`)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
        return False
    return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


def nvidia_gpu_present(
    dev: Path = Path("/dev/nvidia0"), smi: str | None = "nvidia-smi"
) -> str | None:
    """What says an NVIDIA GPU is here (the device node or nvidia-smi), or None."""
    if dev.exists():
        return str(dev)
    if smi and shutil.which(smi):
        return smi
    return None


def unusable_gpu(
    cuda_available: bool | None = None,
    present: str | None = None,
    torch_cuda: str | None = None,
    driver_file: Path = Path("/proc/driver/nvidia/version"),
) -> tuple[str, str] | None:
    """(cause, hint) when an NVIDIA GPU is present but torch cannot use it, else None.
    Typical causes: a CPU-only torch build, or CUDA wheels newer than the loaded driver."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if cuda_available:
        return None
    present = present if present is not None else nvidia_gpu_present()
    if present is None:
        return None
    torch_cuda = torch_cuda if torch_cuda is not None else (torch.version.cuda or "")
    if not torch_cuda:
        return (
            f"an NVIDIA GPU is present ({present}) but this torch ({torch.__version__}) is a "
            "CPU-only build",
            "install a CUDA build of torch (pip install torch from PyPI, or "
            "https://pytorch.org/get-started/locally/)",
        )
    driver = ""
    try:
        line = driver_file.read_text(errors="replace").splitlines()[0]
        driver = next((w for w in line.split() if w[:1].isdigit() and "." in w), "")
    except (OSError, IndexError):
        pass
    loaded = f"driver {driver}" if driver else "the loaded driver"
    return (
        f"an NVIDIA GPU is present ({present}) but torch {torch.__version__} (built for CUDA "
        f"{torch_cuda}) cannot use it with {loaded}",
        f"update the NVIDIA driver to one that supports CUDA {torch_cuda}, or install torch "
        "wheels built for an older CUDA",
    )


def unused_gpu_warning() -> tuple[str, str] | None:
    """(message, hint) for a run that `--device auto` put on the CPU beside an unusable GPU."""
    cause = unusable_gpu()
    return (f"{cause[0]}: training runs on the CPU", cause[1]) if cause else None


def synchronize(device: torch.device) -> None:
    """A host-device sync point: only called at the log cadence and around timed sections."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
