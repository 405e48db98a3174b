"""A model factory for the stalled-rank test ('tests.engine.stall_for_tests:sleeps_on_rank_1'):
rank 1's third training forward sleeps, as a hung data loader or a deadlock would stop it,
while rank 0 goes on into the backward's all-reduce and waits there."""

from __future__ import annotations

import os
import time

import torch
from torch import nn

SLEEP_S = 600.0  # longer than any test: only the stalled_rank stop (or a kill) ends it


class SleepsOnRank1(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))
        self.calls = 0
        self.rank = int(os.environ.get("RANK", "0"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += self.training
        if self.rank == 1 and self.training and self.calls == 3:
            sleep_on_rank_1()
        return self.net(x)


def sleep_on_rank_1() -> None:
    """The frame the test looks for in rank 1's stacks."""
    time.sleep(float(os.environ.get("TUITRAIN_TEST_SLEEP_S", SLEEP_S)))


def sleeps_on_rank_1(num_classes: int) -> nn.Module:
    return SleepsOnRank1(num_classes)
