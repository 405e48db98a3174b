"""`wandb.env`: `set_entity`, `set_project` (HF's sweep path) set wandb's variables."""

from __future__ import annotations

import os


def set_entity(value: str | None, env: dict[str, str] | None = None) -> None:
    if value:
        (os.environ if env is None else env)["WANDB_ENTITY"] = str(value)


def set_project(value: str | None, env: dict[str, str] | None = None) -> None:
    if value:
        (os.environ if env is None else env)["WANDB_PROJECT"] = str(value)
