"""The `classify` task: image classification by cross-entropy over class indices."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tuitrain.engine.tasks.base import Task


class ClassifyTask(Task):
    """Image classification: cross-entropy over class indices (with the configured label
    smoothing for training; the val loss is plain cross-entropy), accuracy per image."""

    name = "classify"
    primary = "acc"
    mode = "max"
    tolerance = 0.005  # half a point of accuracy (parity's McNemar rule keeps its own test)
    logits = True
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
