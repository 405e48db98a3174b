"""tuitrain: a terminal training monitor that hosts a real PyTorch training run, and watches
any script that logs to it (`tuitrain.init`, `tuitrain.log`, `tuitrain.finish`)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "finish", "init", "log"]


def __getattr__(name: str) -> Any:
    """The client's functions, loaded on first use (importing tuitrain stays cheap)."""
    if name in ("init", "log", "finish", "current", "Run"):
        from tuitrain.client import core as client

        return getattr(client, name)
    raise AttributeError(f"module 'tuitrain' has no attribute {name!r}")
