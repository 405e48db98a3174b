"""Factories for the stalled-rank tests. A model ('tests.engine.stall_for_tests:sleeps_on_rank_1'):
rank 1's third training forward sleeps, as a hung data loader or a deadlock would stop it,
while rank 0 goes on into the backward's all-reduce and waits there. A task
('tests.engine.stall_for_tests:slow_eval_on_rank_1'): rank 1's first evaluation takes
SLOW_EVAL_S longer than rank 0's, as a healthy job's may, while rank 0 goes on into the next
step and waits for it there."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch import nn

from tuitrain.engine.tasks.classify import ClassifyTask

SLEEP_S = 600.0  # longer than any test: only the stalled_rank stop (or a kill) ends it
SLOW_EVAL_S = 5.0  # five stalled-rank bounds of 1 s


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


class SlowEvalOnRank1(ClassifyTask):
    def __init__(self, num_classes: int) -> None:
        super().__init__(num_classes=num_classes)
        self.rank = int(os.environ.get("RANK", "0"))
        self.calls = 0

    def validation_step(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.rank == 1 and self.calls == 2:  # 1: the setup's probe; 2: the first evaluation
            time.sleep(SLOW_EVAL_S)
        return super().validation_step(model, batch)


def slow_eval_on_rank_1(num_classes: int) -> ClassifyTask:
    return SlowEvalOnRank1(num_classes)
