"""User factories used by the tests (referenced as 'tests.engine.models_for_tests:...')."""

from __future__ import annotations

import os
import time

import torch
from torch import nn


class NaNAfter(nn.Module):
    """A small model whose output turns NaN from its `after`-th forward call (training only)."""

    def __init__(self, num_classes: int, after: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))
        self.calls = 0
        self.after = after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
        out = self.net(x)
        if self.calls >= self.after:
            out = out * float("nan")
        return out


def nan_model(num_classes: int) -> nn.Module:
    return NaNAfter(num_classes, after=3)


def tiny_mlp(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, num_classes))


def not_a_model(num_classes: int) -> str:
    return "oops"


class _InfGrad(torch.autograd.Function):
    """Identity forward; an infinite gradient backward (a finite loss, overflowing grads)."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")


class InfGradModel(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _InfGrad.apply(self.net(x))  # the weights' gradients come out infinite


def inf_grad_model(num_classes: int) -> nn.Module:
    return InfGradModel(num_classes)


class OOMAfter(nn.Module):
    """Raises torch.OutOfMemoryError on its third training forward (an injected CUDA OOM)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += self.training
        if self.calls == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.net(x)


def oom_model(num_classes: int) -> nn.Module:
    return OOMAfter(num_classes)


class _SlowOnRank1(nn.Module):
    """A tiny MLP whose training forward sleeps on rank 1 only: a straggler under DDP."""

    def __init__(self, num_classes: int, delay_s: float) -> None:
        super().__init__()
        self.net = tiny_mlp(num_classes)
        self.delay_s = delay_s if os.environ.get("RANK") == "1" else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.delay_s:
            time.sleep(self.delay_s)
        return self.net(x)


def slow_on_rank_1(num_classes: int) -> nn.Module:
    return _SlowOnRank1(num_classes, delay_s=0.1)


class _RaiseInEval(nn.Module):
    """A tiny MLP that trains but raises in evaluation once it has trained (a bug in a user's
    model that shows between steps, where the trained state is whole; the dry forward before
    training, in eval mode too, goes through)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = tiny_mlp(num_classes)
        self.trained = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.trained = True
        elif self.trained:
            raise RuntimeError("the test model breaks in evaluation")
        return self.net(x)


def raise_in_eval(num_classes: int) -> nn.Module:
    return _RaiseInEval(num_classes)
