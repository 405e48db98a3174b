"""Install the torch build this machine needs into the running Python (the README's first
command runs it with the virtual environment's python, before `pip install .`).

- torch already importable: nothing to do.
- an NVIDIA GPU (its driver's /proc/driver/nvidia, /dev/nvidia0 or a working `nvidia-smi`):
  PyPI's default build, which is CUDA's on Linux (several GB).
- no NVIDIA GPU on Linux: PyTorch's CPU-only build from download.pytorch.org (~0.2 GB
  instead of ~5.5 GB); where that server cannot be reached (an offline mirror, a closed
  network), PyPI's default build, said in one line.
- macOS and Windows: PyPI's default build (CPU, or Apple's MPS).

`--dry-run` prints the pip command instead of running it. Exit code: pip's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_HOST = "download.pytorch.org"
PACKAGES = ["torch", "torchvision"]


def has_nvidia_gpu() -> bool:
    if os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0"):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def reachable(host: str, timeout_s: float = 5.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def pip_command() -> tuple[list[str] | None, str]:
    """(the pip command to run or None, what was chosen and why, one line)."""
    pip = [sys.executable, "-m", "pip", "install", *PACKAGES]
    if importlib.util.find_spec("torch") is not None:
        return None, "torch is already installed here: keeping it."
    if not sys.platform.startswith("linux"):
        return pip, f"{sys.platform}: PyPI's torch build."
    if has_nvidia_gpu():
        return pip, "an NVIDIA GPU is here: PyPI's CUDA build of torch (several GB)."
    if reachable(CPU_HOST):
        return [*pip, "--index-url", CPU_INDEX], "no NVIDIA GPU here: PyTorch's CPU-only build."
    return pip, (
        f"no NVIDIA GPU here, but {CPU_HOST} cannot be reached: PyPI's torch build instead "
        "(the CUDA one, ~5.5 GB, unless this machine's pip has a local copy)."
    )


def main(argv: list[str]) -> int:
    command, why = pip_command()
    print(f"install_torch: {why}", flush=True)
    if command is None:
        return 0
    if "--dry-run" in argv:
        print(" ".join(command))
        return 0
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
