"""A user model factory that raises, for the engine-failure UI test.

Referenced as `model.name = "tests.ui.failing:make_model"`.
"""

from __future__ import annotations

from torch import nn


def make_model(num_classes: int) -> nn.Module:
    raise RuntimeError(f"the test model refuses to build ({num_classes} classes)")
