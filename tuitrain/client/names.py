"""Framework names as the client's: torch-free, shared by `tuitrain.lightning` and the wandb
face (Lightning's own `WandbLogger` logs the same names through it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuitrain.client import core as client


def lightning_names(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Lightning's metric names as the client's, each original name kept too: `*loss_step`
    -> `loss` (the step values), `val_*_epoch` and `valid_*` -> `val/*`, `lr-<Optimizer>` ->
    `lr`. A name the script logged itself is never replaced by a mapped one."""
    out: dict[str, Any] = {}
    mapped: dict[str, Any] = {}
    for key, value in metrics.items():
        if key == "epoch":
            continue
        out[key] = value
        base = key.removesuffix("_step")
        if base != key and base in client.LOSS_KEYS:
            mapped.setdefault("loss", value)
        name = key.removesuffix("_epoch")
        if name.startswith(("valid_", "valid/")) and len(name) > len("valid_"):
            del out[key]
            out["val/" + key] = value  # the original, in the eval record under its own name
            mapped.setdefault("val/" + name[len("valid_") :], value)
        elif name != key and client.eval_name(name) is not None:
            mapped.setdefault(name, value)  # val_loss_epoch -> val_loss
        if key.startswith("lr-") and len(key) > 3:
            mapped.setdefault("lr", value)  # the first optimizer's (or param group's)
    taken = {client.eval_name(k) or k for k in out} | {
        "loss" for k in out if k in client.LOSS_KEYS
    } | {"lr" for k in out if k in client.LR_KEYS}  # fmt: skip
    for key, value in mapped.items():
        if (client.eval_name(key) or key) not in taken:
            out[key] = value
    if "epoch" in metrics:
        out["epoch"] = metrics["epoch"]
    return out
