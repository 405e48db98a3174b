"""Models with a numerically fragile custom layer, for the parity check's genuine FAIL/ERROR.

Referenced as 'tests.engine.parity_fragile:make_model' (and `make_overflow_model`).

The custom layer is spatial attention gating with a hand-written softmax that, instead of
subtracting the max, subtracts a fixed log-space offset chosen with float32's range in mind:

    w = exp(score - OFFSET) / (sum_positions exp(score - OFFSET) + EPS);  out = v * w * H*W

* `make_model` (OFFSET = 18, a FAIL). In float32, e^-18 ~ 1.5e-8 is an ordinary small number
  and the layer gates the features sensibly (x0.42 at the start, learned afterwards). Under
  fp16 autocast (every op after a conv runs in float16 on the CPU) the smallest subnormal is
  ~6e-8, so every weight underflows to exactly 0: the gated features are 0 and the logits are
  the classifier's bias, a finite loss of ln(10). Backward, the gradient that could revive the
  weights is divided by (0 + EPS); at the GradScaler's first scales it overflows to inf, and
  inf times exp's output (0) is NaN, so the scaler skips the step and halves its scale (about
  14 times); once the scale is small the gradient is finite and exactly 0. Either way the
  convolutions never learn, only the bias does: the run "trains", ends at chance accuracy and
  never stops on a NaN loss, the failure a parity check exists to catch.
* `make_overflow_model` (OFFSET = -20, an ERROR). e^20 ~ 4.9e8 is fine in float32 but overflows
  float16 (max 65504) to inf; inf / inf is NaN and the trainer stops on the NaN loss.

The score conv starts at zero (uniform attention, the usual init), so this holds from the
first step whatever the seed.
"""

from __future__ import annotations

import torch
from torch import nn


class OffsetSoftmaxGate(nn.Module):
    """Spatial attention gating: v * softmax-over-positions(score) * H*W, shape kept."""

    eps = 1e-6

    def __init__(self, channels: int, offset: float) -> None:
        super().__init__()
        self.offset = offset
        self.score = nn.Conv2d(channels, 1, kernel_size=1)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        w = torch.exp(self.score(v) - self.offset)  # runs in v's dtype: fp16 under autocast
        w = w / (w.sum(dim=(2, 3), keepdim=True) + self.eps)
        return v * (w * (v.shape[2] * v.shape[3]))


class FragileCNN(nn.Module):
    """A small CNN for 1×28×28 inputs whose only path to the classifier is the fragile gate."""

    def __init__(self, num_classes: int, offset: float) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )  # fmt: skip
        self.gate = OffsetSoftmaxGate(16, offset)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 7 * 7, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.gate(self.features(x)))


def make_model(num_classes: int) -> nn.Module:
    """Fine in float32, silently wrong in float16: a genuine parity FAIL."""
    return FragileCNN(num_classes, offset=18.0)


def make_overflow_model(num_classes: int) -> nn.Module:
    """Fine in float32, NaN in float16 at the first step: a parity ERROR."""
    return FragileCNN(num_classes, offset=-20.0)
