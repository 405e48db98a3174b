"""Load user factories named 'package.module:function' (models and datasets)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tuitrain.errors import UserError


def load_factory(spec: str, key: str) -> Callable[..., Any]:
    """Import 'package.module:function'; every failure is one sentence naming the key."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"{key} = {spec!r} must look like 'package.module:function'.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"{key} = {spec!r}: cannot import {module_name} ({exc}); "
            "is it installed or on PYTHONPATH?"
        ) from exc
    obj: object = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserError(f"{key} = {spec!r}: {module_name} has no attribute '{attr}'.")
    if not callable(obj):
        raise UserError(f"{key} = {spec!r} is not callable.")
    return obj
