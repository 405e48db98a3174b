"""`import tuitrain.trackio as trackio`: a script written for trackio runs unchanged and writes a
tuitrain run; `tuitrain.trackio.install()` routes every later `import trackio` here, so HF's
`report_to="trackio"` writes one too.

Kept, as trackio has them: `init(project, name, group, config, ...)` (returns the run; the
Space, dataset and resume keywords mean nothing for a run folder), `log(metrics, step)`
(RuntimeError before `init`, as trackio), `finish()`, `config` (after `init`: the run's, with
`update(..., allow_val_change=...)`), `alert(title, text, level)` and `AlertLevel` (an alert
event: the dashboard's banner), `context_vars` (`current_run`, `current_project`,
`current_space_id` None: there is no Space, `current_server`), `__version__`. `freeze`,
`sync`, `show`, `save`, `log_system`, `log_gpu`, `delete_project` are harmless no-ops returning
None; media (`Image`, `Table`, `Histogram`, `Video`, `Audio`, `Markdown`) are left out of a log
call, counted, one warning event per kind.

trackio's names are mapped the way `tuitrain.lightning` maps Lightning's, each original kept
beside its mapping: `train_loss` is the loss and `val_loss`, `val_*` evaluation (the client's
rules); `val_accuracy` -> `val/acc` (tuitrain's accuracy), `valid_*`/`validation_*` ->
`val/*`, `train_lr`/`train_learning_rate` -> lr, `train_grad_norm` -> grad_norm,
`train_epoch` -> epoch. A row carrying HF's `train/global_step` (and no `step`) is written at
that step.

`python -m tuitrain.trackio SCRIPT [ARGS...]` runs SCRIPT unchanged with `import trackio`
routed here.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any

from tuitrain.client import core as client
from tuitrain.wandb import _shared
from tuitrain.wandb.wandb_run import alert_level, whole_step

__version__ = "0.21.1+tuitrain"  # the trackio API it answers for; `+tuitrain` says whose it is

__all__ = ["AlertLevel", "Run", "alert", "config", "context_vars", "finish", "init", "install"]

HF_STEP_KEY = "train/global_step"  # HF's TrackioCallback logs the step as a metric
_ALIASES = {  # trackio's names -> the client's, the original kept beside
    "train_lr": "lr",
    "train_learning_rate": "lr",
    "train_grad_norm": "grad_norm",
    "train_epoch": "epoch",
    "val_accuracy": "val/acc",
}


class _ContextVars:
    """`trackio.context_vars`: the current run, project, Space (None: no Space) and server."""

    current_run: ContextVar[Any] = ContextVar("current_run", default=None)
    current_project: ContextVar[str | None] = ContextVar("current_project", default=None)
    current_server: ContextVar[str | None] = ContextVar("current_server", default=None)
    current_space_id: ContextVar[str | None] = ContextVar("current_space_id", default=None)


context_vars = _ContextVars()


class AlertLevel(str, enum.Enum):  # noqa: UP042 - trackio's own shape
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


def trackio_names(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """trackio's metric names as the client's, each original kept: `val_accuracy` ->
    `val/acc`, `valid_x`/`validation_x` -> `val/x`, `train_lr` -> `lr` ... A name the script
    logged itself is never replaced by a mapped one."""
    out = dict(metrics)
    mapped: dict[str, Any] = {}
    for key, value in metrics.items():
        alias = _ALIASES.get(key)
        if alias is not None:
            mapped.setdefault(alias, value)
        for prefix in ("validation_", "valid_"):
            if key.startswith(prefix) and len(key) > len(prefix):
                del out[key]
                out["val/" + key] = value  # the original, in the eval record under its name
                mapped.setdefault("val/" + key[len(prefix) :], value)
                break
    taken = {client.eval_name(k) or k for k in out} | {
        "lr" for k in out if k in client.LR_KEYS
    } | {"epoch" for k in out if k in client.EPOCH_KEYS} | {
        "grad_norm" for k in out if k in client.GRAD_NORM_KEYS
    }  # fmt: skip
    for key, value in mapped.items():
        if (client.eval_name(key) or key) not in taken:
            out[key] = value
    return out


class Run:
    """trackio's `Run` over a tuitrain client run (`Run.client` is that run)."""

    def __init__(self, run: client.Run, project: str | None) -> None:
        self.client = run
        self.project = project
        self._left_out = _shared.LeftOut(run)

    @property
    def name(self) -> str:
        return self.client.name

    @property
    def dir(self) -> str:
        return str(self.client.dir)

    @property
    def config(self) -> client.Config:
        return self.client.config

    @property
    def finished(self) -> bool:
        return self.client.finished

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        values = self._left_out.numbers(metrics)
        if step is None and HF_STEP_KEY in values:
            at = whole_step(values[HF_STEP_KEY])
            if at is not None:
                del values[HF_STEP_KEY]
                step = at
        self.client.log(trackio_names(values), step)

    def alert(self, title: str, text: str | None = None, level: Any = "warn", **_: Any) -> None:
        self.client.alert(title, text or "", alert_level(level))

    def finish(self) -> None:
        self.client.finish()
        if context_vars.current_run.get() is self:
            context_vars.current_run.set(None)

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.client.__exit__(kind, exc, tb)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "client":
            raise AttributeError(name)
        return getattr(self.client, name)


class _Config(client.Config):
    """`trackio.config`: after `init` the run's (writes become `config` events)."""

    def update(self, values: Any = None, allow_val_change: bool = True, **more: Any) -> None:  # type: ignore[override]
        merged = {**dict(values or {}), **more}
        super().update(merged)
        run = _current()
        if run is not None:
            run.client.update_config(merged)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        run = _current()
        if run is not None:
            run.client.update_config({key: value})


config = _Config()


def _current() -> Run | None:
    run = context_vars.current_run.get()
    return run if isinstance(run, Run) and not run.finished else None


def init(
    project: str | None = None,
    name: str | None = None,
    group: str | None = None,
    config: Mapping[str, Any] | None = None,  # noqa: A002 - trackio's keyword
    **_: Any,
) -> Run:
    """Start a run: under `tuitrain run` its run dir, else runs/<name>-<timestamp> (a `-2`
    ... suffix where that folder holds a run). `project` and `group` are the run's metadata
    (the header's `config.meta`)."""
    running = _current()
    if running is not None:
        running.finish()
    meta = {k: v for k, v in (("project", project), ("group", group)) if v}
    # the client picks the folder: runs/<name>-<stamp>, made atomically (rundirs)
    inner = client.init(None, dict(config or {}), name, **meta)
    dict.clear(globals()["config"])
    dict.update(globals()["config"], inner.config)
    inner.config = globals()["config"]
    run = Run(inner, project)
    context_vars.current_run.set(run)
    context_vars.current_project.set(project)
    return run


def log(metrics: Mapping[str, Any], step: int | None = None) -> None:
    run = _current()
    if run is None:
        raise RuntimeError("Call trackio.init() before trackio.log().")
    run.log(metrics, step)


def finish() -> None:
    run = _current()
    if run is not None:
        run.finish()


def alert(title: str, text: str | None = None, level: Any = "warn", **_: Any) -> None:
    run = _current()
    if run is not None:
        run.alert(title, text, level)


def _nothing(*_: Any, **__: Any) -> None:
    """trackio's Space and dashboard calls: no Space, no dashboard (`tuitrain watch` is)."""
    return None


freeze = sync = show = save = log_system = log_gpu = delete_project = _nothing


def install() -> None:
    """Route every later `import trackio` (and `trackio.context_vars`) here: HF's
    `report_to="trackio"` then writes a tuitrain run. Idempotent; where the real trackio is
    imported already it is refused (UserError, one sentence)."""
    from tuitrain.wandb import _routing

    _routing.route("trackio", __name__, __version__)
    sys.modules["trackio.context_vars"] = context_vars  # type: ignore[assignment]


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(name)
    return _shared.unsupported("trackio", name)


if __name__ == "__main__":  # python -m tuitrain.trackio SCRIPT [ARGS...]
    import tuitrain.trackio as face
    from tuitrain.wandb._routing import run_routed

    sys.exit(run_routed("trackio", face.install, sys.argv[1:]))
