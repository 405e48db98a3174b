"""`import tuitrain.wandb as wandb`: a script written for wandb runs unchanged and writes a
tuitrain run (then `tuitrain watch`, `export`, `watch --compare` read it; under `tuitrain run
-- python train.py` the dashboard shows it live).

Supported, as wandb has them: `init(project, name, config, dir, ...)` (returns the run),
`log(data, step, commit)`, `config` (attribute and item access, `update`), `summary`,
`finish(exit_code)`, `run`, `define_metric(name, step_metric)`, `alert(title, text, level)`,
`Settings`, `login` (nothing to log in to). Anything else is a no-op that says so once on
stderr: media (`Image`, `Table`, `Histogram`...), artifacts, `watch(model)`, sweeps. These
are the calls trackio's drop-in keeps as well (init / log / finish / config / summary).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from tuitrain.client import core as client

__all__ = ["config", "define_metric", "finish", "init", "log", "run", "summary"]

run: client.Run | None = None


class _Config(client.Config):
    """`wandb.config` before and after `init`: writes go to the current run."""

    def update(self, values: Any = (), allow_val_change: bool = True, **more: Any) -> None:  # type: ignore[override]
        merged = {**dict(values), **more}
        super().update(merged)
        if run is not None and not run.finished:
            run.update_config(merged)

    def setdefaults(self, values: Mapping[str, Any]) -> None:
        self.update({k: v for k, v in values.items() if k not in self})

    def __setattr__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __setitem__(self, key: str, value: Any) -> None:
        if run is not None and not run.finished:
            run.update_config({key: value})
        super().__setitem__(key, value)


config = _Config()
summary: dict[str, Any] = {}


def init(
    project: str | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | Any | None = None,  # noqa: A002 - wandb's keyword
    dir: str | None = None,  # noqa: A002 - wandb's keyword
    **kwargs: Any,
) -> client.Run:
    """Start a run: `dir` or `TUITRAIN_RUN_DIR` or runs/<name>-<timestamp>; `project`,
    `entity`, `tags`, `notes`, `group`, `job_type` go into the config under `wandb`."""
    global run, summary
    values = _as_dict(config)
    keys = ("entity", "tags", "notes", "group", "job_type")
    extras: dict[str, Any] = {k: kwargs[k] for k in keys if k in kwargs}
    if project or extras:
        meta: dict[str, Any] = {"project": project, **extras}
        values["wandb"] = meta
    directory = dir if dir is not None and not os.environ.get("TUITRAIN_RUN_DIR") else None
    if directory is not None:
        directory = os.path.join(directory, "tuitrain-" + (name or client.script_name()))
    run = client.init(directory, {**dict(globals()["config"]), **values}, name)
    dict.clear(globals()["config"])
    dict.update(globals()["config"], run.config)
    run.config = globals()["config"]
    summary = run.summary
    return run


def log(
    data: Mapping[str, Any], step: int | None = None, commit: bool | None = None, **_: Any
) -> None:
    current = run if run is not None and not run.finished else init()
    current.log(data, step, commit=True if commit is None else bool(commit))


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    global run
    if run is not None:
        run.finish(exit_code)
    run = None


def define_metric(name: str, step_metric: str | None = None, **kwargs: Any) -> None:
    current = run if run is not None and not run.finished else init()
    current.define_metric(name, step_metric, **kwargs)


def alert(title: str, text: str = "", level: Any = "warning", **_: Any) -> None:
    if run is not None:
        run.alert(title, text, str(getattr(level, "value", level)))


def login(*_: Any, **__: Any) -> bool:
    return True


class Settings:
    def __init__(self, *_: Any, **__: Any) -> None:
        pass


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "__dict__"):  # an argparse Namespace, a dataclass instance
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return {"config": value}


_said: set[str] = set()


class _Ignored:
    """What an unsupported call returns: callable, attribute access, all no-ops."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __call__(self, *_: Any, **__: Any) -> _Ignored:
        return self

    def __getattr__(self, _name: str) -> _Ignored:
        return self


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _said:
        _said.add(name)
        print(f"tuitrain.wandb: wandb.{name} is not supported; ignored", file=sys.stderr)
    return _Ignored
