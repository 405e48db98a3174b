"""`import tuitrain.wandb as wandb`: a script written for wandb runs unchanged and writes a
tuitrain run (then `tuitrain watch`, `export`, `watch --compare` read it; under `tuitrain run
-- python train.py` the dashboard shows it live).

Kept, as wandb has them: `init(project, name, config, dir, tags, notes, group, job_type,
entity, mode)` (returns the run; `with wandb.init() as run:` finishes it), `log(data, step,
commit)` (numbers, numpy scalars, scalar tensors, nested tables flattened to `a/b`; a step
that goes back is dropped with a warning, as wandb does), `config` (attribute and item access,
`update` with a table or an argparse Namespace, `setdefaults`, `as_dict`), `summary` (each
key's last logged value at once), `finish(exit_code)`, `run` (None outside a run; `id`,
`name`, `project`, `dir`, `step`, `tags`, `notes`, `group`, `url` None, `path`),
`define_metric(name, step_metric)`, `alert(title, text, level)`, `AlertLevel`, `errors`
(real exception classes), `agent(sweep_id, function, count)` (calls `function` `count` times,
each trial its own run), `mode="disabled"` / `WANDB_MODE=disabled` (no run dir at all),
`Settings`, `login` (nothing to log in to). Anything else is a harmless no-op that says so once
on stderr (it can be called and its attributes read): media (`Image`, `Table`, `Histogram`...),
`plot`, artifacts, `watch(model)`, `save`, `Api`.
"""

from __future__ import annotations

import enum
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from tuitrain.client import core as client

__all__ = [
    "AlertLevel",
    "agent",
    "alert",
    "config",
    "define_metric",
    "errors",
    "finish",
    "init",
    "log",
    "login",
    "summary",
]

_run: client.Run | _DisabledRun | None = None  # `wandb.run` reads it (None once finished)


class _Config(client.Config):
    """`wandb.config` before and after `init`: writes go to the current run."""

    def update(self, values: Any = None, allow_val_change: bool = True, **more: Any) -> None:  # type: ignore[override]
        merged = {**_as_dict(values), **more}
        super().update(merged)
        if _run is not None and not _run.finished:
            _run.update_config(merged)

    def setdefaults(self, values: Any) -> None:
        self.update({k: v for k, v in _as_dict(values).items() if k not in self})

    def as_dict(self) -> dict[str, Any]:
        return dict(self)

    def __setattr__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __setitem__(self, key: str, value: Any) -> None:
        if _run is not None and not _run.finished:
            _run.update_config({key: value})
        super().__setitem__(key, value)


config = _Config()
summary: dict[str, Any] = {}


class _DisabledRun:
    """`mode="disabled"`: every call a no-op, nothing written."""

    def __init__(self, name: str | None, meta: Mapping[str, Any]) -> None:
        self.id = "disabled"
        self.name = name or client.script_name()
        self.project = meta.get("project")
        self.entity = meta.get("entity")
        self.tags = tuple(meta.get("tags") or ())
        self.notes, self.group = meta.get("notes"), meta.get("group")
        self.job_type = meta.get("job_type")
        self.url: str | None = None
        self.path = f"{self.project or 'tuitrain'}/disabled"
        self.dir = Path(tempfile.gettempdir())  # somewhere a script may write; no run dir
        self.config: client.Config = config
        self.summary: dict[str, Any] = {}
        self.should_stop = False
        self.finished = False
        self.step = 0

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
        if step is None and commit:
            self.step += 1

    def update_config(self, values: Mapping[str, Any]) -> None:
        pass

    def define_metric(self, *_: Any, **__: Any) -> None:
        pass

    def alert(self, *_: Any, **__: Any) -> None:
        pass

    def finish(self, exit_code: int | None = None, **_: Any) -> None:
        self.finished = True

    def __enter__(self) -> _DisabledRun:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.finish()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Ignored


def _disabled(mode: Any) -> bool:
    if mode is None:
        mode = os.environ.get("WANDB_MODE")
        if os.environ.get("WANDB_DISABLED", "").lower() in ("1", "true", "yes"):
            mode = "disabled"
    return str(mode).lower() == "disabled"


def init(
    project: str | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | Any | None = None,  # noqa: A002 - wandb's keyword
    dir: str | None = None,  # noqa: A002 - wandb's keyword
    **kwargs: Any,
) -> Any:
    """Start a run: under `tuitrain run` its run dir, else `dir`/tuitrain-<name> or
    runs/<name>-<timestamp> (a `-2`, `-3` ... suffix where that run dir holds a run already).
    `project`, `entity`, `tags`, `notes`, `group`, `job_type` are the run's metadata (the
    header's `config.meta`), never `wandb.config`."""
    global _run, summary
    values = _as_dict(config)
    meta: dict[str, Any] = {k: kwargs[k] for k in client.META_KEYWORDS if kwargs.get(k)}
    if project:
        meta["project"] = project
    merged = {**dict(globals()["config"]), **values}
    if _run is not None and not _run.finished:
        _run.finish()
    if _disabled(kwargs.get("mode")):
        dict.clear(globals()["config"])
        dict.update(globals()["config"], merged)
        _run = _DisabledRun(name, meta)
        summary = _run.summary
        return _run
    directory: str | None = None
    if not os.environ.get("TUITRAIN_RUN_DIR"):
        stem = name or client.script_name()
        if dir is not None:
            directory = _unique(os.path.join(dir, "tuitrain-" + stem))
        else:
            directory = _unique(f"runs/{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    run = client.init(directory, merged, name, **meta)
    dict.clear(globals()["config"])
    dict.update(globals()["config"], run.config)
    run.config = globals()["config"]
    summary = run.summary
    _run = run
    return run


def _unique(path: str) -> str:
    """`path`, or `path-2`, `path-3` ... where it holds a run already (each init its own)."""
    found, n = path, 1
    while os.path.exists(os.path.join(found, "metrics.jsonl")):
        n += 1
        found = f"{path}-{n}"
    return found


def _live() -> Any:
    return _run if _run is not None and not _run.finished else init()


def log(
    data: Mapping[str, Any], step: int | None = None, commit: bool | None = None, **_: Any
) -> None:
    _live().log(data, step, commit=True if commit is None else bool(commit))


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    global _run
    if _run is not None:
        _run.finish(exit_code)
    _run = None


def define_metric(name: str, step_metric: str | None = None, **kwargs: Any) -> None:
    _live().define_metric(name, step_metric, **kwargs)


class AlertLevel(enum.StrEnum):
    INFO = "INFO"
    WARN = "WARN"
    ERROR = "ERROR"


_LEVELS = {"INFO": "info", "WARN": "warning", "WARNING": "warning", "ERROR": "error"}


def alert(title: str, text: str = "", level: Any = "warning", **_: Any) -> None:
    if _run is not None and not _run.finished:
        word = str(getattr(level, "value", level)).upper()
        _run.alert(title, text, _LEVELS.get(word, "warning"))


def agent(
    sweep_id: str | None = None,
    function: Callable[[], Any] | None = None,
    entity: str | None = None,
    project: str | None = None,
    count: int | None = None,
    **_: Any,
) -> None:
    """wandb's sweep agent without a sweep server: `function` runs `count` times (1 by
    default), each trial its own run (one left open is finished before the next)."""
    if function is None:
        return
    for _trial in range(1 if count is None else int(count)):
        try:
            function()
        finally:
            finish()


def sweep(*_: Any, **__: Any) -> str:
    """No sweep server: an id `agent` accepts."""
    return "tuitrain-sweep"


def login(*_: Any, **__: Any) -> bool:
    return True


class Settings:
    def __init__(self, *_: Any, **__: Any) -> None:
        pass


class _Errors:
    """`wandb.errors`: real exception classes (`except wandb.errors.CommError:` works); any
    other name is `Error`. Nothing here raises them: there is no server to fail."""

    class Error(Exception):
        pass

    class CommError(Error):
        pass

    class UsageError(Error):
        pass

    class AuthenticationError(Error):
        pass

    def __getattr__(self, name: str) -> type[Exception]:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.Error


errors = _Errors()
Error = _Errors.Error


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "__dict__"):  # an argparse Namespace, a dataclass instance
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return {"config": value}


_said: set[str] = set()


class _IgnoredType(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class _Ignored(metaclass=_IgnoredType):
    """What an unsupported name gives: a class (isinstance works) whose attributes, calls and
    instances' attributes and calls are all no-ops (`wandb.plot.line(...)`,
    `wandb.Image(x)`, `wandb.Api().runs(...)`)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __call__(self, *_: Any, **__: Any) -> _Ignored:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self


def __getattr__(name: str) -> Any:
    if name == "run":
        return _run if _run is not None and not _run.finished else None
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _said:
        _said.add(name)
        print(f"tuitrain.wandb: wandb.{name} is not supported; ignored", file=sys.stderr)
    return _Ignored
