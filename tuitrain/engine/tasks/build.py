"""The task named by `task.name`: a built-in one (classify, charlm) or a user's factory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuitrain.core.config import Config
from tuitrain.core.errors import UserError
from tuitrain.engine.factory import accepted_kwargs, blame_user, load_factory
from tuitrain.engine.tasks.base import Task, as_task
from tuitrain.engine.tasks.charlm import CharLMTask
from tuitrain.engine.tasks.classify import ClassifyTask


def build_task(cfg: Config, offered: Mapping[str, Any]) -> Task:
    """The task named by `task.name`: classify, charlm, or a user factory."""
    name = cfg.task.name
    if name == "classify":
        return ClassifyTask(cfg.train.label_smoothing, offered.get("num_classes"))
    if name == "charlm":
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
    return as_task(task, name)


def task_label(cfg: Config) -> str:
    return f"task.name = {cfg.task.name!r}"
