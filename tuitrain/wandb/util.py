"""`wandb.util`: `generate_id` (scripts name runs and folders with it); anything else a no-op."""

from __future__ import annotations

import secrets
import string
from typing import Any

from tuitrain.wandb._shared import unsupported

_ALPHABET = string.ascii_lowercase + string.digits


def generate_id(length: int = 8) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return unsupported("wandb", f"util.{name}")
