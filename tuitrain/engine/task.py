"""What is trained: the loss and the metrics, as a swappable part of the engine.

A task is any object with

* `training_step(model, batch)` -> the loss (a scalar tensor), or `(loss, {name: scalar})`;
* optionally `validation_step(model, batch)` -> `{name: tensor}`: a scalar (the batch's mean)
  or one value per item (a 1-D tensor of the batch's length); the engine averages each over
  the validation set, weighted by the batch size; `loss` becomes the eval record's `val_loss`,
  `acc` its `val_acc`, any other `name` `val_<name>`;
* optionally `batch_size(batch)` (default: the first dimension of the first tensor),
  `tokens(batch)` (an int: the records then carry `tokens_per_s`), `primary` and `mode` (the
  validation metric that best-so-far, parity and alerts use: default `loss` / `min`),
  `metrics` (`{name: {"goal": "min"|"max", "format": "float"|"pct", "unit": str}}`, how
  readers show each metric), `tolerance` (the parity gap that passes, in the primary
  metric's units) and `sample(model, device)` (a short text shown as an event after each
  evaluation).

The engine keeps everything around the step: autocast, the GradScaler, accumulation,
clipping, DDP, the FLOP count, exact resume. Tasks here: `classify` (today's image
classification, unchanged) and `charlm` (engine/charlm.py); a user's own is a factory
`package.module:function` called with the keyword arguments it accepts among those offered
(`num_classes`, `label_smoothing`, `seed`, `vocabulary`).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tuitrain.config import Config
from tuitrain.engine.factory import blame_user, load_factory
from tuitrain.errors import UserError
from tuitrain.metrics.records import CONTRACT_FIELDS, USER_PREFIX, user_field

METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}")


class ClassifyTask:
    """Image classification: cross-entropy over class indices (with the configured label
    smoothing for training; the val loss is plain cross-entropy), accuracy per image."""

    name = "classify"
    primary = "acc"
    mode = "max"
    tolerance = 0.005  # half a point of accuracy (parity's McNemar rule keeps its own test)
    metrics = {
        "loss": {"goal": "min", "format": "float", "unit": "nats"},
        "acc": {"goal": "max", "format": "pct", "unit": ""},
    }

    def __init__(self, label_smoothing: float = 0.0, num_classes: int | None = None) -> None:
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        # what a model that guesses uniformly scores: the divergence alert's reference
        self.chance = (
            {"loss": math.log(num_classes), "acc": 1.0 / num_classes} if num_classes else {}
        )

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return self.criterion(model(x), y)

    def validation_step(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = model(x).float()
        return {
            "loss": F.cross_entropy(logits, y, reduction="none"),
            "acc": (logits.argmax(dim=1) == y).float(),
        }


def eval_key(name: str) -> str:
    """The eval record's field for a validation metric: loss -> val_loss, acc -> val_acc."""
    return f"val_{name}"


def build_task(cfg: Config, offered: Mapping[str, Any]) -> Any:
    """The task named by `task.name`: classify, charlm, or a user factory."""
    name = cfg.task.name
    if name == "classify":
        return ClassifyTask(cfg.train.label_smoothing, offered.get("num_classes"))
    if name == "charlm":
        from tuitrain.engine.charlm import CharLMTask

        return CharLMTask(offered.get("vocabulary"), cfg.train.seed)
    if ":" not in name:
        raise UserError(
            f"task.name = {name!r} is unknown; use classify, charlm or a factory "
            "'package.module:function'."
        )
    factory = load_factory(name, "task.name")
    kwargs = accepted_kwargs(factory, offered)
    with blame_user(
        lambda error: f"task.name = {name!r}: {name}(...) raised {error}; fix the factory."
    ):
        task = factory(**kwargs)
    if not callable(getattr(task, "training_step", None)):
        raise UserError(
            f"task.name = {name!r} returned a {type(task).__name__} without a training_step"
            " method; a task needs training_step(model, batch) returning the loss."
        )
    mode = getattr(task, "mode", "min")
    if mode not in ("min", "max"):
        raise UserError(f"task.name = {name!r}: its mode is {mode!r:.40}; use 'min' or 'max'.")
    return task


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


# --------------------------------------------------------------------------- the task's answers


def task_label(cfg: Config) -> str:
    return f"task.name = {cfg.task.name!r}"


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


def batch_size_of(task: Any, batch: Any, label: str) -> int:
    """The task's batch_size(batch), or the first dimension of the batch's first tensor."""
    own = getattr(task, "batch_size", None)
    if callable(own):
        n = own(batch)
    else:
        t = first_tensor(batch)
        if t is None or t.dim() == 0:
            raise UserError(
                f"{label}: a batch holds no tensor with a batch dimension; give the task a"
                " batch_size(batch) method."
            )
        n = t.shape[0]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"{label}: batch_size(batch) gave {n!r:.40}; it must be an int >= 1.")
    return n


def to_device(batch: Any, device: torch.device) -> Any:
    """Every tensor in a batch (tuples, lists, dicts, nested) moved to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


# --------------------------------------------------------------------------- declarations


def declarations(
    task: Any, train_metrics: list[str], val_metrics: list[str], spec: str = "custom"
) -> dict[str, Any]:
    """What the header says about the task's metrics, so readers need no constants:
    `{"name", "primary": field, "mode", "tolerance", "metrics": [{name, split, goal, format,
    unit}]}` with the train and eval records' field names."""
    own: Mapping[str, Any] = getattr(task, "metrics", None) or {}
    primary = getattr(task, "primary", "loss")
    mode = getattr(task, "mode", "min")

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

    tolerance = getattr(task, "tolerance", None)
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        tolerance = None
    return {
        "name": str(getattr(task, "name", spec)),
        "primary": eval_key(primary) if primary in val_metrics else None,
        "mode": mode,
        "tolerance": tolerance,
        "metrics": [declare(n, "train") for n in train_metrics]
        + [declare(n, "val") for n in val_metrics],
    }
