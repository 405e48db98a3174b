"""`wandb.wandb_run.Run` (also `wandb.sdk.wandb_run.Run`): the run `wandb.init` returns, over a
tuitrain client run, and `RunDisabled`, what `mode="disabled"` returns.

`Run` keeps what a script reads (`id`, `name`, `dir` as text, `step`, `summary`, `config`,
`settings` ...) and maps what it calls: `log` (media left out, one warning event per kind),
`define_metric("*", step_metric=M)` (what HF's and Lightning's wandb paths call: each log
call carrying M is written at step M, and M itself is not a metric of its own; HF's
`train/global_step` going back is the Trainer's next `train()`, a run of its own), `alert`.
What tuitrain does not keep (`log_artifact`, `use_artifact`, `save`, `watch`, `unwatch`,
`log_code`, `mark_preempting` ...) is a no-op that never raises.
"""

from __future__ import annotations

import contextlib
import io
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from tuitrain.client import core as client
from tuitrain.client.names import lightning_names
from tuitrain.wandb._shared import Ignored, LeftOut, Settings, ignored, say_once

LIGHTNING_AXIS = "trainer/global_step"  # Lightning WandbLogger's x for every metric
HF_AXIS = "train/global_step"  # HF's WandbCallback's x (report_to="wandb")
_LEVELS = {"INFO": "info", "WARN": "warning", "WARNING": "warning", "ERROR": "error"}


def alert_level(level: Any) -> str:
    """wandb's and trackio's AlertLevel (or its text) as an event level."""
    return _LEVELS.get(str(getattr(level, "value", level)).upper(), "warning")


def whole_step(value: Any) -> int | None:
    """A step metric's value as a step (an int, numpy's integers, a whole float), else None."""
    if isinstance(value, bool):
        return None
    try:
        at = operator.index(value)
    except TypeError:
        try:
            x = float(value)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(x) or not x.is_integer():
            return None
        at = int(x)
    return at if at >= 0 else None


class Artifact:
    """wandb's `Artifact`: accepted and not kept (tuitrain keeps metrics; the files stay where
    they are). `new_file` writes nowhere; `download` gives the folder it would use."""

    def __init__(self, name: str = "", type: str = "", **kwargs: Any) -> None:  # noqa: A002
        self.name, self.type = name, type
        self.metadata: dict[str, Any] = dict(kwargs.get("metadata") or {})
        self.description = kwargs.get("description")
        self.aliases: list[str] = []

    @contextlib.contextmanager
    def new_file(self, name: str, mode: str = "x", encoding: str | None = None) -> Iterator[Any]:
        yield io.BytesIO() if "b" in mode else io.StringIO()

    def download(self, root: str | None = None, **_: Any) -> str:
        import tempfile

        return root or tempfile.gettempdir()

    def __getattr__(self, name: str) -> Any:  # add_file, add_dir, add_reference, wait, save ...
        if name.startswith("_"):
            raise AttributeError(name)
        return ignored("Artifact")()


class Run:
    """A wandb run over a tuitrain client run (`Run.client` is that run)."""

    def __init__(self, run: client.Run) -> None:
        self.client = run
        self._axis: str | None = None  # define_metric("*", step_metric=...)
        self._axis_at: int | None = None  # its last value (step_sync: rows without it)
        # wandb.init again with this run's arguments (the module sets it): HF's next train()
        self._reopen: Callable[[], Run | RunDisabled] | None = None
        self._left_out = LeftOut(run)
        self._artifacts_said = False
        self.settings = Settings(
            mode="offline", run_id=run.id, run_name=run.name, project=run.project,
            entity=run.entity, files_dir=str(run.dir), root_dir=str(run.dir), _offline=True,
        )  # fmt: skip

    # ------------------------------------------------------------------ what scripts read
    @property
    def dir(self) -> str:
        """The run dir, as text (wandb's `run.dir` is a str)."""
        return str(self.client.dir)

    @property
    def id(self) -> str:
        return self.client.id

    @property
    def name(self) -> str:
        return self.client.name

    @name.setter
    def name(self, value: str) -> None:
        self.client.name = str(value)

    @property
    def step(self) -> int:
        return self.client.step

    @property
    def summary(self) -> dict[str, Any]:
        return self.client.summary

    @property
    def config(self) -> client.Config:
        return self.client.config

    @config.setter
    def config(self, value: client.Config) -> None:
        self.client.config = value

    @property
    def finished(self) -> bool:
        return self.client.finished

    @property
    def disabled(self) -> bool:
        return False

    @property
    def offline(self) -> bool:
        return True

    # ------------------------------------------------------------------ what scripts call
    def log(
        self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None,
        sync: bool | None = None,
    ) -> None:  # fmt: skip
        """wandb's `log`; with `define_metric("*", step_metric=M)` a row carrying M is
        written at step M (a row without it at M's last value, wandb's step_sync)."""
        values = self._left_out.numbers(data)
        if step is None and self._axis is not None:
            at = whole_step(values.get(self._axis))
            if at is not None:
                values.pop(self._axis)
                self._axis_at = at
            if at is not None and self._axis == HF_AXIS and at < self.client.highest_step:
                self._next_train(data, at)
                return
            step = self._axis_at
            if not values:
                return
            if self._axis == LIGHTNING_AXIS:  # Lightning's WandbLogger: Lightning's names
                values = lightning_names(values)
            high = self.client.highest_step
            if step is not None and step < high:
                # wandb's own step never goes back, the axis is only an x: a row whose axis
                # value is behind (Lightning's evaluation loops log at their batch counter)
                # lands at the run's current step rather than being dropped
                self.client.say_once(
                    f"log: rows whose {self._axis} is behind the run's step are placed at"
                    " the run's current step (an evaluation loop's own counter); the last"
                    " value at a step is kept"
                )
                step = high
        self.client.log(values, step, commit=True if commit is None else bool(commit))

    def _next_train(self, data: Mapping[str, Any], at: int) -> None:
        """HF's global step went back: the Trainer's next `train()` (the same Trainer again,
        another one whose WandbCallback found this run open, a resume from an earlier
        checkpoint). Its rows would land at this run's last step, over one another, so it
        is a run of its own, as `tuitrain.hf.TuitrainCallback` makes it: this one ends
        (completed) and `wandb.init` opens the next with the same arguments and config."""
        self.client.finish(
            status="completed",
            reason=f"the HF Trainer's {HF_AXIS} went back to {at} (its next train()): the"
            " next train() is a run of its own",
        )
        if self._reopen is None:
            return
        after = self._reopen()
        if isinstance(after, Run):
            after._axis = self._axis  # its WandbCallback defined the axis once, on this run
        after.log(data)

    def define_metric(self, name: str, step_metric: str | None = None, **kwargs: Any) -> None:
        """`define_metric("*", step_metric=M)`: M is the step (see `log`); another glob
        (`val/*`) is plotted against M's value, as the client does."""
        if step_metric and name == "*":
            self._axis = step_metric
        elif step_metric:
            self.client.define_metric(name, step_metric, **kwargs)

    def alert(self, title: str, text: str = "", level: Any = "WARN", **_: Any) -> None:
        self.client.alert(title, text, alert_level(level))

    def update_config(self, values: Mapping[str, Any]) -> None:
        self.client.update_config(values)

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:
        self.client.finish(exit_code)

    def _artifacts(self) -> None:
        if not self._artifacts_said:
            self._artifacts_said = True
            self.client.say_once(
                "artifacts are not kept: tuitrain keeps metrics (the files stay where they are)"
            )

    def log_artifact(self, artifact: Any = None, *_: Any, **__: Any) -> Any:
        self._artifacts()
        return artifact if isinstance(artifact, Artifact) else Artifact(str(artifact or ""))

    def use_artifact(self, artifact: Any = None, *_: Any, **__: Any) -> Any:
        self._artifacts()
        return artifact if isinstance(artifact, Artifact) else Artifact(str(artifact or ""))

    log_model = use_model = link_model = link_artifact = upsert_artifact = log_artifact

    def save(self, *_: Any, **__: Any) -> list[str]:
        return []

    def watch(self, *_: Any, **__: Any) -> None:
        say_once("tuitrain.wandb: run.watch is not supported (no gradient histograms); ignored")

    def unwatch(self, *_: Any, **__: Any) -> None:
        pass

    def log_code(self, *_: Any, **__: Any) -> None:
        return None

    def mark_preempting(self) -> None:
        pass

    def _label(self, *_: Any, **__: Any) -> None:
        pass

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.client.__exit__(kind, exc, tb)

    def __getattr__(self, name: str) -> Any:
        """The client run's attributes (`project`, `tags`, `url`, `path`, `should_stop` ...);
        any other public name is a no-op (said once)."""
        if name.startswith("_") or name == "client":
            raise AttributeError(name)
        try:
            return getattr(self.client, name)
        except AttributeError:
            say_once(f"tuitrain.wandb: run.{name} is not supported; ignored")
            return ignored(f"run.{name}")()

    def __repr__(self) -> str:
        return f"<tuitrain.wandb Run {self.id} at {self.dir}>"


class RunDisabled:
    """`mode="disabled"`: every call a no-op, nothing written."""

    def __init__(self, name: str | None, meta: Mapping[str, Any], config: client.Config) -> None:
        self.id = "disabled"
        self.name = name or client.script_name()
        self.project = meta.get("project")
        self.entity = meta.get("entity")
        self.tags = tuple(meta.get("tags") or ())
        self.notes, self.group = meta.get("notes"), meta.get("group")
        self.job_type = meta.get("job_type")
        self.url: str | None = None
        self.path = f"{self.project or 'tuitrain'}/disabled"
        import tempfile

        self.dir = tempfile.gettempdir()  # somewhere a script may write; no run dir
        self.config = config
        self.summary: dict[str, Any] = {}
        self.settings = Settings(mode="disabled", run_id=self.id, files_dir=self.dir)
        self.should_stop = False
        self.finished = False
        self.disabled = True
        self.step = 0

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool = True,
            **_: Any) -> None:  # fmt: skip
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

    def _label(self, *_: Any, **__: Any) -> None:
        pass

    def __enter__(self) -> RunDisabled:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.finish()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return Ignored


__all__ = ["Artifact", "Run", "RunDisabled"]
