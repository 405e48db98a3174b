"""What is trained: the loss and the metrics, as a swappable part of the engine.

The engine trains through `Task` (below): its methods and declarations, with no-op defaults.

* `training_step(model, batch)` -> the loss (a scalar tensor), or `(loss, {name: scalar})`;
* `validation_step(model, batch)` -> `{name: tensor}`: a scalar (the batch's mean) or one
  value per item (a 1-D tensor of the batch's length); the engine averages each over the
  validation set, weighted by the batch size; each `name` becomes the eval record's
  `val_<name>` (`loss` its `val_loss`). The default (None): the training loss on the
  validation set;
* `batch_size(batch)` (default: the first dimension of the first tensor), `tokens(batch)`
  (an int: the records then carry `tokens_per_s`; default None, not counted), `primary` and
  `mode` (the validation metric that best-so-far, parity and alerts use: default `loss` /
  `min`), `metrics` (`{name: {"goal": "min"|"max", "format": "float"|"pct", "unit": str}}`,
  how readers show each metric), `tolerance` (the parity gap that passes, in the primary
  metric's units), `chance` (`{name: value}` a model that guesses scores: the divergence
  alert's reference) and `sample(model, device)` (a short text shown as an event after each
  evaluation; default None).

A user's task need not subclass `Task`: any object with `training_step` is adapted once, when
the task is built (`as_task`), to a `Task` that forwards to what it has; the engine then
calls a Task's methods and never probes for them.

The engine keeps everything around the step: autocast, the GradScaler, accumulation,
clipping, DDP, the FLOP count, exact resume. Tasks here: `classify` (image
classification, tasks/classify.py) and `charlm` (tasks/charlm.py); a user's own is a
factory `package.module:function` called with the keyword arguments it accepts among those
offered (`num_classes`, `label_smoothing`, `seed`, `vocabulary`): tasks/build.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from tuitrain.core.errors import UserError
from tuitrain.metrics.records import CONTRACT_FIELDS, USER_PREFIX, user_field

METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}")


class Task:
    """What the engine trains through. Subclass it and override `training_step` (required)
    and whatever else the task has; every other method and declaration has a default that
    does nothing of its own. The engine never probes a task: it calls these."""

    name: str | None = None  # None: the header names the task by its spec (`task.name`)
    primary: str = "loss"  # the validation metric best-so-far, parity and alerts use
    mode: str = "min"  # "min" or "max": which way `primary` is better
    tolerance: float | None = None  # the parity gap that passes, in primary's units
    metrics: Mapping[str, Any] = {}  # {name: {"goal", "format", "unit"}}: how readers show it
    chance: Mapping[str, float] = {}  # {name: value} a uniform guess scores
    # the model returns class logits of shape (N, data.num_classes): before the dry step the
    # engine checks the model on one zero input and says in one sentence what does not fit
    logits: bool = False

    def training_step(self, model: nn.Module, batch: Any) -> Any:
        """The loss (a scalar float tensor), or (loss, {name: scalar})."""
        raise NotImplementedError

    def validation_step(self, model: nn.Module, batch: Any) -> Mapping[str, Any] | None:
        """{name: batch mean or per-item values}; None: the training loss on the val set."""
        return None

    def batch_size(self, batch: Any) -> int | None:
        """How many items `batch` holds; None: no tensor with a batch dimension in it."""
        t = first_tensor(batch)
        return None if t is None or t.dim() == 0 else int(t.shape[0])

    def tokens(self, batch: Any) -> int | None:
        """How many tokens `batch` holds (records then carry tokens_per_s); None: not counted."""
        return None

    @property
    def counts_tokens(self) -> bool:
        """Whether `tokens` is the task's own (the header's `task.tokens`)."""
        return type(self).tokens is not Task.tokens

    def sample(self, model: nn.Module, device: torch.device) -> str | None:
        """A short text shown as an event after each evaluation (rank 0); None: none."""
        return None


class TaskAdapter(Task):
    """A user's task object that is no `Task`: what it has, looked up once, as a Task."""

    def __init__(self, obj: Any, spec: str) -> None:
        self.obj = obj
        self.label = f"task.name = {spec!r}"
        self.name = str(getattr(obj, "name", spec))
        self.primary = getattr(obj, "primary", "loss")
        self.mode = getattr(obj, "mode", "min")
        self.tolerance = getattr(obj, "tolerance", None)
        self.metrics = getattr(obj, "metrics", None) or {}
        self.chance = getattr(obj, "chance", None) or {}
        self._training_step = obj.training_step
        self._validation_step = _method(obj, "validation_step")
        self._batch_size = _method(obj, "batch_size")
        self._tokens = _method(obj, "tokens")
        self._sample = _method(obj, "sample")

    def training_step(self, model: nn.Module, batch: Any) -> Any:
        return self._training_step(model, batch)

    def validation_step(self, model: nn.Module, batch: Any) -> Mapping[str, Any] | None:
        if self._validation_step is None:
            return None
        out = self._validation_step(model, batch)
        if out is None:  # a validation_step of its own that gives nothing: as any non-dict
            raise UserError(
                f"{self.label}: validation_step returned a NoneType; it must return a dict"
                " {name: tensor} (a batch mean, or one value per item)."
            )
        return cast("Mapping[str, Any]", out)

    def batch_size(self, batch: Any) -> int | None:
        if self._batch_size is None:
            return super().batch_size(batch)
        n = self._batch_size(batch)
        if n is None:  # its own batch_size gave None: not "no tensor in the batch"
            raise UserError(f"{self.label}: batch_size(batch) gave None; it must be an int >= 1.")
        return cast(int, n)

    def tokens(self, batch: Any) -> int | None:
        return None if self._tokens is None else cast(int, self._tokens(batch))

    @property
    def counts_tokens(self) -> bool:
        return self._tokens is not None

    def sample(self, model: nn.Module, device: torch.device) -> str | None:
        return None if self._sample is None else cast("str | None", self._sample(model, device))


def _method(obj: Any, name: str) -> Any:
    found = getattr(obj, name, None)
    return found if callable(found) else None


def as_task(obj: Any, spec: str) -> Task:
    """`obj` as a Task: itself when it is one, else adapted (`TaskAdapter`); one sentence
    when it has no training_step or declares a mode other than min/max."""
    if isinstance(obj, Task):
        if type(obj).training_step is Task.training_step:
            raise UserError(
                f"task.name = {spec!r} returned a {type(obj).__name__} that does not override"
                " training_step; a task needs training_step(model, batch) returning the loss."
            )
        task = obj
    else:
        if not callable(getattr(obj, "training_step", None)):
            raise UserError(
                f"task.name = {spec!r} returned a {type(obj).__name__} without a training_step"
                " method; a task needs training_step(model, batch) returning the loss."
            )
        task = TaskAdapter(obj, spec)
    if task.mode not in ("min", "max"):
        raise UserError(f"task.name = {spec!r}: its mode is {task.mode!r:.40}; use 'min' or 'max'.")
    return task


def eval_key(name: str) -> str:
    """The eval record's field for a validation metric: loss -> val_loss, bpc -> val_bpc."""
    return f"val_{name}"


# --------------------------------------------------------------------------- the task's answers


def split_training_output(out: Any, label: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, metrics) from what training_step returned, checked: one sentence otherwise."""
    metrics: Any = {}
    if isinstance(out, tuple) and len(out) == 2:
        out, metrics = out
    if not (isinstance(out, torch.Tensor) and out.dim() == 0 and out.is_floating_point()):
        what = (
            f"a tensor of shape {tuple(out.shape)}"
            if isinstance(out, torch.Tensor)
            else f"a {type(out).__name__}"
        )
        raise UserError(
            f"{label}: training_step returned {what} as the loss; it must return a scalar float"
            " tensor (e.g. loss.mean()), or (loss, {name: scalar tensor})."
        )
    if not isinstance(metrics, Mapping):
        raise UserError(
            f"{label}: training_step returned (loss, a {type(metrics).__name__}); the second"
            " item must be a dict {name: scalar tensor}."
        )
    checked: dict[str, torch.Tensor] = {}
    for key, value in metrics.items():
        check_name(key, label, "training_step")
        # a name of the contract's (`grad_norm`, `mfu`, `type` ...) is kept as `user/<name>`:
        # the engine's own measurement is never replaced
        checked[user_field(key)] = as_scalar(value, key, label, "training_step")
    return out, checked


def check_name(key: object, label: str, where: str) -> None:
    if not isinstance(key, str) or not METRIC_NAME.fullmatch(key):
        raise UserError(
            f"{label}: {where} returned a metric named {key!r:.70}; a metric name is 1 to 64"
            " letters, digits or _ . / - (not starting with a digit)."
        )


def as_scalar(value: Any, key: str, label: str, where: str) -> torch.Tensor:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value))
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return value.detach().reshape(())
    raise UserError(
        f"{label}: {where}'s metric {key!r} is {describe(value)}; give a scalar (a number or"
        " a one-element tensor)."
    )


def validation_values(
    out: Any, batch_size: int, label: str
) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """{name: (batch sum, per-item values or None)} from validation_step's dict."""
    if not isinstance(out, Mapping):
        raise UserError(
            f"{label}: validation_step returned a {type(out).__name__}; it must return a dict"
            " {name: tensor} (a batch mean, or one value per item)."
        )
    values: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for key, value in out.items():
        check_name(key, label, "validation_step")
        if isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel() == batch_size:
            items = value.detach().float()
            values[key] = (items.sum(), items)
        else:
            mean = as_scalar(value, key, label, "validation_step").float()
            values[key] = (mean * batch_size, None)
    return values


def describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def batch_size_of(task: Task, batch: Any, label: str) -> int:
    """The task's batch_size(batch) (by default the first dimension of the batch's first
    tensor), checked: one sentence when it is no int >= 1."""
    n = task.batch_size(batch)
    if n is None:
        raise UserError(
            f"{label}: a batch holds no tensor with a batch dimension; give the task a"
            " batch_size(batch) method."
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"{label}: batch_size(batch) gave {n!r:.40}; it must be an int >= 1.")
    return n


# --------------------------------------------------------------------------- declarations


def declarations(
    task: Task, train_metrics: list[str], val_metrics: list[str], spec: str = "custom"
) -> dict[str, Any]:
    """What the header says about the task's metrics, so readers need no constants:
    `{"name", "primary": field, "mode", "tolerance", "metrics": [{name, split, goal, format,
    unit}]}` with the train and eval records' field names."""
    own: Mapping[str, Any] = task.metrics or {}
    primary, mode = task.primary, task.mode

    def declare(name: str, split: str) -> dict[str, Any]:
        given = name.removeprefix(USER_PREFIX) if name.startswith(USER_PREFIX) else name
        given = given if given in CONTRACT_FIELDS else name  # user/grad_norm: grad_norm's spec
        spec = own.get(given, {}) if isinstance(own.get(given, {}), Mapping) else {}
        goal = spec.get("goal")
        if goal is None and given == "loss":
            goal = "min"
        if goal is None and name == primary:
            goal = mode
        fmt = spec.get("format", "float")
        return {
            "name": eval_key(name) if split == "val" else name,
            "split": split,
            "goal": goal if goal in ("min", "max") else None,
            "format": fmt if fmt in ("float", "pct") else "float",
            "unit": str(spec.get("unit", ""))[:32],
        }

    tolerance = task.tolerance
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        tolerance = None
    return {
        "name": spec if task.name is None else str(task.name),
        "primary": eval_key(primary) if primary in val_metrics else None,
        "mode": mode,
        "tolerance": tolerance,
        "metrics": [declare(n, "train") for n in train_metrics]
        + [declare(n, "val") for n in val_metrics],
    }
