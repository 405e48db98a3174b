"""The image models: the seeds' Fashion-MNIST CNN and MLP, torchvision's ResNet-18 (ImageNet
stem or, for small images, the CIFAR stem), by name in `MODELS`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tuitrain.core.errors import UserError


class FashionCNN(nn.Module):
    """The tutorials' CNN: two conv blocks (32, 64 channels), a 256-unit layer, dropout."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.5, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(256, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class MLP(nn.Module):
    """The tutorials' first model: 784 -> 256 -> 128 -> classes."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.2, in_features: int = 784) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, 256), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _fashion_cnn(num_classes: int, dropout: float, shape: tuple[int, ...]) -> nn.Module:
    if tuple(shape[1:]) != (28, 28):
        raise UserError(f"model fashion_cnn needs 28x28 inputs, the data gives {shape}.")
    return FashionCNN(num_classes, dropout, in_channels=shape[0])


def _mlp(num_classes: int, dropout: float, shape: tuple[int, ...]) -> nn.Module:
    return MLP(num_classes, dropout, in_features=int(torch.tensor(shape).prod()))


def _resnet18(num_classes: int, dropout: float, shape: tuple[int, ...]) -> nn.Module:
    from torchvision.models import resnet18

    model = resnet18(weights=None, num_classes=num_classes)
    if shape[0] != 3:
        model.conv1 = nn.Conv2d(shape[0], 64, 7, 2, 3, bias=False)
    return model


def _resnet18_cifar(num_classes: int, dropout: float, shape: tuple[int, ...]) -> nn.Module:
    """ResNet-18 for small images (He et al.'s CIFAR stem): a 3x3 stride-1 first convolution and
    no max-pool, so a 28x28 image keeps 28x28 through the first stage (the ImageNet stem would
    take it to 7x7 before any residual block). The last BN of each block starts at zero, as in
    Goyal et al.'s large-batch recipe, so each block starts as the identity."""
    from torchvision.models import resnet18

    if len(shape) != 3 or min(shape[1:]) < 8:
        raise UserError(
            f"model resnet18_cifar needs images of at least 8x8 pixels, the data gives {shape}."
        )
    model = resnet18(weights=None, num_classes=num_classes, zero_init_residual=True)
    model.conv1 = nn.Conv2d(shape[0], 64, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


MODELS: dict[str, Callable[[int, float, tuple[int, ...]], nn.Module]] = {
    "fashion_cnn": _fashion_cnn,
    "mlp": _mlp,
    "resnet18": _resnet18,
    "resnet18_cifar": _resnet18_cifar,
}
