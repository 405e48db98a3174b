"""`import tuitrain.wandb as wandb`: a script written for wandb runs unchanged and writes a
tuitrain run (then `tuitrain watch`, `export`, `watch --compare` read it; under `tuitrain run
-- python train.py` the dashboard shows it live). `tuitrain.wandb.install()` routes every later
`import wandb` here, so the frameworks' own wandb paths (HF's `report_to="wandb"`,
Lightning's `WandbLogger`, accelerate's tracker) write a tuitrain run too.

Kept, as wandb has them: `init(project, name, config, dir, tags, notes, group, job_type,
entity, mode)` (returns the run, a `wandb_run.Run`; `with wandb.init() as run:` finishes it),
`log(data, step, commit)` (numbers, numpy scalars, scalar tensors, nested tables flattened to
`a/b`; a step that goes back is dropped with a warning, as wandb does), `config` (attribute
and item access, `update` with a table or an argparse Namespace, `setdefaults`, `as_dict`),
`summary` (each key's last logged value at once), `finish(exit_code)`, `run` (None outside a
run; `id`, `name`, `project`, `dir` (text), `step`, `tags`, `notes`, `group`, `url` None,
`path`, `settings`), `define_metric(name, step_metric)` (`"*"`: that metric is the step),
`alert(title, text, level)`, `AlertLevel`, `errors` (real exception classes), `agent(sweep_id,
function, count)` (calls `function` `count` times, each trial its own run), `mode="disabled"`
/ `WANDB_MODE=disabled` (no run dir at all), `Settings`, `login` (nothing to log in to),
`termwarn`/`termlog`/`termerror` (stderr), `require`, `Artifact` (accepted, not kept).
Anything else is a harmless no-op that says so once on stderr (it can be called and its
attributes read): media (`Image`, `Table`, `Histogram`, `Video`, `Audio`, `Html`...) and
`plot.*` (a logged one is left out, counted, one warning event per kind), `watch(model)`,
`save`, `Api`.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tuitrain.client import core as client
from tuitrain.rundir.manifest import fresh_dir
from tuitrain.wandb import _shared
from tuitrain.wandb._shared import Settings
from tuitrain.wandb.wandb_run import Artifact, Run, RunDisabled, alert_level

__version__ = "0.22.0+tuitrain"  # the wandb API it answers for; `+tuitrain` says whose it is

__all__ = [
    "AlertLevel",
    "Artifact",
    "Settings",
    "agent",
    "alert",
    "config",
    "define_metric",
    "errors",
    "finish",
    "init",
    "install",
    "log",
    "login",
    "summary",
]

_run: Run | RunDisabled | None = None  # `wandb.run` reads it (None once finished)


class _Config(client.Config):
    """`wandb.config` before and after `init`: writes go to the current run."""

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "_items", self)  # vars(wandb.config)["_items"] (HF's sweeps)

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
    dir: str | os.PathLike[str] | None = None,  # noqa: A002 - wandb's keyword
    **kwargs: Any,
) -> Run | RunDisabled:
    """Start a run: under `tuitrain run` its run dir, else `dir`/tuitrain-<name> or
    runs/<name>-<timestamp> (a `-2`, `-3` ... suffix where that folder exists already: two
    processes starting at once get two folders).
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
        _run = RunDisabled(name, meta, globals()["config"])
        summary = _run.summary
        return _run
    directory: str | None = None
    if not os.environ.get("TUITRAIN_RUN_DIR"):
        stem = name or client.script_name()
        if dir is not None:  # a fresh folder each init, made atomically (rundirs), as wandb's
            base = Path(dir) / ("tuitrain-" + stem)  # own dir/wandb/run-<stamp>-<id> is
            # another rank of a torchrun job writes nothing: it makes no folder of its own
            directory = str(base if client.other_rank() is not None else fresh_dir(base))
        # else None: the client picks runs/<name>-<stamp>, made atomically (rundirs)
    inner = client.init(directory, merged, name, **meta)
    dict.clear(globals()["config"])
    dict.update(globals()["config"], inner.config)
    inner.config = globals()["config"]
    summary = inner.summary
    _run = Run(inner)
    _run._reopen = lambda: init(project, name, None, dir, **kwargs)  # config: wandb.config's
    return _run


def _live() -> Run | RunDisabled:
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


def alert(title: str, text: str = "", level: Any = "WARN", **_: Any) -> None:
    if _run is not None and not _run.finished:
        _run.alert(title, text, alert_level(level))


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


def log_artifact(artifact: Any = None, *args: Any, **kwargs: Any) -> Any:
    """Accepted, not kept (one warning event in the run: tuitrain keeps metrics)."""
    if _run is not None and not _run.finished:
        return _run.log_artifact(artifact, *args, **kwargs)
    return artifact if isinstance(artifact, Artifact) else Artifact(str(artifact or ""))


use_artifact = log_artifact


def sweep(*_: Any, **__: Any) -> str:
    """No sweep server: an id `agent` accepts."""
    return "tuitrain-sweep"


def login(*_: Any, **__: Any) -> bool:
    return True


def require(*_: Any, **__: Any) -> None:
    """wandb's feature switches (`require("service")`): nothing to switch on."""


def _attach(*_: Any, **__: Any) -> Run | RunDisabled | None:
    """Lightning's reattach after a spawn: the run this process has, if any."""
    return _run if _run is not None and not _run.finished else None


def termlog(string: str = "", repeat: bool = True, **_: Any) -> None:
    _term("", string, repeat)


def termwarn(string: str = "", repeat: bool = True, **_: Any) -> None:
    _term("WARNING ", string, repeat)


def termerror(string: str = "", repeat: bool = True, **_: Any) -> None:
    _term("ERROR ", string, repeat)


def _term(prefix: str, string: str, repeat: bool) -> None:
    line = f"wandb: {prefix}{string}"
    if repeat:
        print(line, file=sys.stderr)
    else:
        _shared.say_once(line)


class _Errors:
    """`wandb.errors`: real exception classes (`except wandb.errors.CommError:` works); any
    other name is `Error`. Nothing here raises them: there is no server to fail."""

    Error = _shared.Error
    CommError = _shared.CommError
    UsageError = _shared.UsageError
    AuthenticationError = _shared.AuthenticationError

    def __getattr__(self, name: str) -> type[Exception]:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.Error


errors = _Errors()
Error = _shared.Error


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "__dict__"):  # an argparse Namespace, a dataclass instance
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return {"config": value}


def install() -> None:
    """Route every later `import wandb` (and `wandb.sdk...`, `wandb.wandb_run`, `wandb.util`,
    `wandb.env`) here: HF's `report_to="wandb"`, Lightning's `WandbLogger` and accelerate's
    tracker then write a tuitrain run. Idempotent; where the real wandb is imported already it
    is refused (UserError, one sentence): call it before importing the framework."""
    from tuitrain.wandb import _routing

    _routing.route(
        "wandb", __name__, __version__, ("wandb_run", "sdk", "sdk.lib.config_util", "env", "util"),
        extra={"sdk.wandb_run": f"{__name__}.wandb_run"},
    )  # fmt: skip


_SUBMODULES = ("env", "sdk", "util", "wandb_run")


def __getattr__(name: str) -> Any:
    if name == "run":
        return _run if _run is not None and not _run.finished else None
    if name in _SUBMODULES:  # imported on first use: a plain import stays cheap
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("_"):  # private names and submodules (`from ... import _x`) stay real
        raise AttributeError(name)
    return _shared.unsupported("wandb", name)
