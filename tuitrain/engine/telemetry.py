"""Memory and device telemetry read at log points: the allocator, device-wide memory in use
(NVML or cudaMemGetInfo), NVML utilisation where present, host RSS."""

from __future__ import annotations

import os
import resource
from typing import Any

import torch


def host_rss_bytes() -> int:
    """Resident set size of this process (always filled, on every platform)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB; peak only
        return int(peak_kib) * 1024


def nvml_uuid(device: torch.device) -> str | None:
    """The torch device's UUID as NVML spells it ("GPU-…"/"MIG-…"), or None. torch numbers
    devices after CUDA_VISIBLE_DEVICES, NVML does not: only the UUID names the same GPU."""
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "")
    if not uuid:
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


class Telemetry:
    """Reads memory and utilisation. On CUDA, NVML (nvidia-ml-py, a default dependency on
    Linux) gives utilisation and the device-wide memory in use, for the GPU found by the
    torch device's UUID; without NVML the memory in use comes from cudaMemGetInfo and
    utilisation stays null."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._nvml_handle: Any = None
        self._nvml: Any = None
        self.nvml_error: str | None = None
        if device.type == "cuda":
            self._init_nvml()

    def _init_nvml(self) -> None:
        try:
            import pynvml  # from nvidia-ml-py

            pynvml.nvmlInit()
            uuid = nvml_uuid(self.device)
            if uuid is not None:
                self._nvml_handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            elif "CUDA_VISIBLE_DEVICES" not in os.environ:  # indices agree only then
                self._nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(self.device.index or 0)
            else:
                self.nvml_error = "no device UUID from torch under CUDA_VISIBLE_DEVICES"
                return
            self._nvml = pynvml
        except Exception as exc:  # absent library, no driver, container without NVML
            self._nvml = None
            self.nvml_error = f"{type(exc).__name__}: {exc}"

    def total_memory_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return int(torch.cuda.get_device_properties(self.device).total_memory)
        return None

    def read(self) -> dict[str, int | float | None]:
        out: dict[str, int | float | None] = {
            "mem_alloc_bytes": None,
            "mem_reserved_bytes": None,
            "mem_peak_bytes": None,
            "host_rss_bytes": host_rss_bytes(),
            "gpu_util_pct": None,
            "gpu_mem_used_bytes": None,
        }
        if self.device.type == "cuda":
            out["mem_alloc_bytes"] = torch.cuda.memory_allocated(self.device)
            out["mem_reserved_bytes"] = torch.cuda.memory_reserved(self.device)
            out["mem_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
        elif self.device.type == "mps":
            out["mem_alloc_bytes"] = torch.mps.current_allocated_memory()
            out["mem_reserved_bytes"] = torch.mps.driver_allocated_memory()
        if self._nvml is not None:
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(self._nvml_handle)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(self._nvml_handle)
                out["gpu_util_pct"] = float(util.gpu)
                out["gpu_mem_used_bytes"] = int(mem.used)
            except Exception:
                pass
        if self.device.type == "cuda" and out["gpu_mem_used_bytes"] is None:
            try:  # device-wide, all processes: what nvidia-smi shows as used
                free, total = torch.cuda.mem_get_info(self.device)
                out["gpu_mem_used_bytes"] = int(total - free)
            except RuntimeError:
                pass
        return out
