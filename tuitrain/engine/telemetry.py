"""Memory and device telemetry read at log points: allocator, NVML where present, host RSS."""

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


class Telemetry:
    """Reads memory and utilisation; NVML is imported only on CUDA and only if installed."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._nvml_handle: Any = None
        self._nvml: Any = None
        if device.type == "cuda":
            self._init_nvml()

    def _init_nvml(self) -> None:
        try:
            import pynvml  # from nvidia-ml-py

            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else 0
            self._nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # absent library, no driver, container without NVML: fields stay null
            self._nvml = None

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
        return out
