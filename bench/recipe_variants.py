"""Model variants of the third recipe search (issue #18), as user factories for `model.name`.

    PYTHONPATH=bench tuitrain --no-ui --preset fashion-fp32 --seed S \\
        --set model.name=recipe_variants:batchnorm

`kaiming`: the seeds' CNN (dropout 0.25, as the presets) with Kaiming-normal weights (fan_in,
ReLU gain) and zero biases in the ReLU-followed layers instead of torch's default init.
`batchnorm`: the seeds' CNN with a BatchNorm after each convolution (convolution bias off): a
normalisation layer, so no longer the seeds' model. What they reached: BENCHMARKS.md
("A third search").
"""

from __future__ import annotations

import torch
from torch import nn

from tuitrain.engine.models.vision import FashionCNN

DROPOUT = 0.25  # the fashion presets' model.dropout (a factory gets num_classes only)


def kaiming(num_classes: int) -> nn.Module:
    model = FashionCNN(num_classes, DROPOUT)
    layers = [m for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    for layer in layers[:-1]:  # the last Linear feeds the loss, not a ReLU
        nn.init.kaiming_normal_(layer.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(layer.bias)
    return model


class BatchNormCNN(nn.Module):
    def __init__(self, num_classes: int, dropout: float = DROPOUT) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(256, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def batchnorm(num_classes: int) -> nn.Module:
    return BatchNormCNN(num_classes)
