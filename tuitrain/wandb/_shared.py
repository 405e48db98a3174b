"""What the wandb and trackio faces share: the no-op stand-ins for what tuitrain does not keep
(media, plots, the Api), `Settings`, the exception classes, and the left-out bookkeeping of a
log call (one warning event per kind of value left out, every such value counted)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

_said: set[str] = set()  # names said once on stderr, for the whole process


def say_once(what: str) -> None:
    """One line on stderr, once per process."""
    if what not in _said:
        _said.add(what)
        print(what, file=sys.stderr)


class _IgnoredType(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class Ignored(metaclass=_IgnoredType):
    """What an unsupported name gives: a class (isinstance works) whose attributes, calls and
    instances' attributes and calls are all no-ops (`wandb.plot.line(...)`,
    `wandb.Image(x)`, `wandb.Api().runs(...)`). `kind` names it in the left-out warning."""

    kind = "value"

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __call__(self, *_: Any, **__: Any) -> Ignored:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self


_kinds: dict[str, type[Ignored]] = {}


def ignored(name: str) -> type[Ignored]:
    """The no-op class for `name` (one per name: `wandb.Image` and `wandb.Table` differ)."""
    if name not in _kinds:
        made: Any = _IgnoredType(name.rsplit(".", 1)[-1], (Ignored,), {"kind": name})
        _kinds[name] = made
    return _kinds[name]


def unsupported(face: str, name: str) -> type[Ignored]:
    """A face's module `__getattr__` for a name it does not have: said once, then a no-op."""
    say_once(f"tuitrain.{face}: {face}.{name} is not supported; ignored")
    return ignored(f"{face}.{name}")


def kind_of(value: Any) -> str | None:
    """The kind of a value tuitrain leaves out of a log call (`wandb.Image`, a list of them),
    None for anything else (numbers, tensors: the client reads those)."""
    if isinstance(value, Ignored):
        return type(value).kind
    if isinstance(value, type) and issubclass(value, Ignored):
        return value.kind
    if isinstance(value, (list, tuple)) and value:
        kinds = {kind_of(item) for item in value}
        if len(kinds) == 1:
            return kinds.pop()
    return None


class LeftOut:
    """A run's left-out values: each counted in the run's `dropped_values`, one warning
    event per kind (`run.say_once`)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.kinds: set[str] = set()

    def numbers(self, data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        """`data` without what tuitrain does not keep (nested tables kept as tables)."""
        out: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, Mapping):
                out[key] = self.numbers(value, f"{prefix}{key}/")
                continue
            kind = kind_of(value)
            if kind is None:
                out[key] = value
                continue
            self.run.dropped_values += 1
            if kind not in self.kinds:
                self.kinds.add(kind)
                self.run.say_once(
                    f"log: {kind} values are left out (tuitrain keeps numbers only), first"
                    f" under {prefix}{key!s:.60}; every one is counted in the end record's"
                    f" dropped_values (said once per kind)"
                )
        return out


class Settings:
    """wandb's `Settings`: what it is given, readable as attributes; anything else None."""

    def __init__(self, *_: Any, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class Error(Exception):
    """wandb's base exception (nothing here raises it: there is no server to fail)."""


class CommError(Error):
    pass


class UsageError(Error):
    pass


class AuthenticationError(Error):
    pass


class ConfigError(Error):
    """`wandb.sdk.lib.config_util.ConfigError`."""
