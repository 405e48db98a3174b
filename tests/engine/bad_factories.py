"""User factories that are wrong in the ways users get them wrong (tests/engine/test_bad_inputs.py
names them as 'tests.engine.bad_factories:...')."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

# --------------------------------------------------------------------------- models


def no_parameters(num_classes: int) -> nn.Module:
    return nn.Flatten()


def all_frozen(num_classes: int) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))
    model.requires_grad_(False)
    return model


def raises_value_error(num_classes: int) -> nn.Module:
    raise ValueError("no such size\nsecond line that stays out of the message")


def huge_model(num_classes: int) -> nn.Module:
    return nn.Linear(2**24, 2**21)  # 128 TiB of weights: the CPU allocator refuses at once


def wrong_input(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(5, num_classes))  # the data gives 784


def wrong_classes(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes + 1))


class _Pair(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(x)
        return out, out


def returns_tuple(num_classes: int) -> nn.Module:
    return _Pair(num_classes)


class _Noisy(nn.Module):
    """Adds noise in eval mode too: its dry forward draws from the global RNG."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x + torch.randn_like(x))


def noisy(num_classes: int) -> nn.Module:
    return _Noisy(num_classes)


class _HostOOMInTraining(nn.Module):
    """Fine in the dry forward (eval); the CPU allocator refuses in the first training step."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            torch.empty(2**45, dtype=torch.uint8)  # 32 TiB
        return self.net(x)


def host_oom_in_training(num_classes: int) -> nn.Module:
    return _HostOOMInTraining(num_classes)


# --------------------------------------------------------------------------- datasets


class Items(Dataset):
    """n items (x of `shape` filled with i, label i % 10), with overrides for some indices:
    `odd` maps an index to the item it returns instead (or an exception it raises)."""

    def __init__(
        self, n: int, shape: tuple[int, ...] = (1, 28, 28), odd: dict[int, object] | None = None,
        length: object = None,
    ) -> None:  # fmt: skip
        self.n, self.shape, self.odd, self.length = n, shape, odd or {}, length

    def __len__(self) -> int:
        return self.n if self.length is None else self.length  # type: ignore[return-value]

    def __getitem__(self, i: int) -> object:
        if i in self.odd:
            item = self.odd[i]
            if isinstance(item, BaseException):
                raise item
            return item
        return torch.full(self.shape, float(i % 200)), i % 10


def good(split: str) -> Dataset:
    return Items(64 if split == "train" else 32)


def val_smaller_images(split: str) -> Dataset:
    return Items(64 if split == "train" else 32, (1, 28, 28) if split == "train" else (1, 14, 14))


def val_three_channels(split: str) -> Dataset:
    return Items(64 if split == "train" else 32, (1, 28, 28) if split == "train" else (3, 28, 28))


def ragged(split: str) -> Dataset:
    return Items(64, odd={5: (torch.zeros(1, 14, 14), 5)})


def string_labels(split: str) -> Dataset:
    return Items(64, odd={i: (torch.zeros(1, 28, 28), "cat") for i in range(64)})


def string_label_later(split: str) -> Dataset:
    return Items(64, odd={7: (torch.zeros(1, 28, 28), "cat")})


def key_error_later(split: str) -> Dataset:
    return Items(64, odd={9: KeyError("image_9")})


def key_error_first(split: str) -> Dataset:
    return Items(64, odd={0: KeyError("image_0")})


def negative_length(split: str) -> Dataset:
    return Items(64, length=-1)
