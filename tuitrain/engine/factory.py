"""Load user factories named 'package.module:function' (models and datasets), and describe
what user code raised in one line."""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from tuitrain.core.errors import UserError

_LINE_MAX = 200


def error_line(exc: BaseException) -> str:
    """'Type: first line of the message', short; for an exception a DataLoader worker raised
    (re-raised in this process as 'Caught Type in DataLoader worker process N. Original
    Traceback ...'), the worker's own last line, which names the error."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("Caught ") and "Original Traceback" in text:
        line = lines[-1]  # 'KeyError: 7' as the worker saw it
    else:
        line = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return line if len(line) <= _LINE_MAX else line[: _LINE_MAX - 1] + "…"


@contextlib.contextmanager
def blame_user(sentence: Callable[[str], str]) -> Iterator[None]:
    """What the user's code (a factory, a dataset's items, a model's forward) raises inside is
    one UserError, `sentence(error_line(exc))`. A UserError passes as it is, and so does running
    out of memory (reported as out of memory, with its advice)."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        if is_memory_error(exc):
            raise
        raise UserError(sentence(error_line(exc))) from exc


def is_memory_error(exc: BaseException) -> bool:
    """Out of memory: a device OOM, or the CPU allocator (or Python) refusing an allocation.

    Memory is not the user code's fault nor ours; callers let it through to be reported as
    out of memory."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "DefaultCPUAllocator" in text
        and ("can't allocate memory" in text or "not enough memory" in text)
    )


def load_factory(spec: str, key: str) -> Callable[..., Any]:
    """Import 'package.module:function'; every failure is one sentence naming the key."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"{key} = {spec!r} must look like 'package.module:function'.")
    if module_name.startswith("."):
        raise UserError(
            f"{key} = {spec!r} names a relative module; write the full name, "
            "'package.module:function'."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"{key} = {spec!r}: cannot import {module_name} ({exc}); "
            "is it installed or on PYTHONPATH?"
        ) from exc
    except Exception as exc:  # a SyntaxError, or the module raised while it was imported
        raise UserError(
            f"{key} = {spec!r}: importing {module_name} raised {error_line(exc)}; fix the module."
        ) from exc
    obj: object = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserError(f"{key} = {spec!r}: {module_name} has no attribute '{attr}'.")
    if not callable(obj):
        raise UserError(f"{key} = {spec!r} is not callable.")
    return obj


def accepted_kwargs(factory: Any, offered: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments among `offered` that `factory` accepts (all with **kwargs)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it bare
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(offered)
    names = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {k: v for k, v in offered.items() if k in names}
