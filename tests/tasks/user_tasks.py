"""A user's own task, model and data, as a preset names them ('tests.tasks.user_tasks:...'):
a regression with a custom metric, and the same with dict-shaped batches."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

FEATURES = 8


def _points(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x . w + 0.1 noise, from a generator seeded by the split (the same every time)."""
    generator = torch.Generator().manual_seed(1 if split == "train" else 2)
    n = 512 if split == "train" else 128
    x = torch.randn(n, FEATURES, generator=generator)
    w = torch.linspace(-1.0, 1.0, FEATURES)
    y = x @ w + 0.1 * torch.randn(n, generator=generator)
    return x, y


def regression_data(split: str) -> Dataset:
    return TensorDataset(*_points(split))


class DictData(Dataset):
    """Items {"features": x, "target": y}: batches collate to a dict."""

    def __init__(self, split: str) -> None:
        self.x, self.y = _points(split)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"features": self.x[i], "target": self.y[i]}


def dict_data(split: str) -> Dataset:
    return DictData(split)


def regressor() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))


class Regression:
    """Mean squared error; mean absolute error as the primary metric (min)."""

    primary = "mae"
    mode = "min"
    tolerance = 0.05
    metrics = {"mae": {"goal": "min", "format": "float", "unit": ""}}

    def split(self, batch):  # (x, y) tuples
        return batch

    def training_step(self, model, batch):
        x, y = self.split(batch)
        pred = model(x).squeeze(-1).float()
        loss = nn.functional.mse_loss(pred, y)
        return loss, {"mae": (pred - y).abs().mean().detach()}

    def validation_step(self, model, batch):
        x, y = self.split(batch)
        err = model(x).squeeze(-1).float() - y
        return {"loss": err.pow(2), "mae": err.abs()}  # one value per item


class DictRegression(Regression):
    def split(self, batch):
        return batch["features"], batch["target"]

    def batch_size(self, batch):
        return batch["target"].shape[0]


def regression_task() -> Regression:
    return Regression()


def dict_regression_task() -> DictRegression:
    return DictRegression()


class NanMetric(Regression):
    def training_step(self, model, batch):
        loss, _ = super().training_step(model, batch)
        return loss, {"ratio": torch.tensor(float("nan"))}


def nan_metric_task() -> NanMetric:
    return NanMetric()


def scalar_loss_missing_task() -> object:
    class Bad:
        def training_step(self, model, batch):
            return "not a loss"

    return Bad()


class ContractNames(Regression):
    """Train metrics named like fields of the train record: kept as user/<name>."""

    metrics = {**Regression.metrics, "mfu": {"goal": "max", "format": "pct", "unit": ""}}

    def training_step(self, model, batch):
        loss, metrics = super().training_step(model, batch)
        fixed = {"grad_norm": 1234.0, "samples_per_s": -1.0, "mfu": 0.5, "type": 3.0}
        return loss, {**metrics, **{k: torch.tensor(v) for k, v in fixed.items()}}


def contract_names_task() -> ContractNames:
    return ContractNames()
