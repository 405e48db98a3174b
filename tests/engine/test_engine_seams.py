"""The engine's seams: the Task protocol (and the adapter a duck-typed task gets once), the
parallelism strategy, and the state the Trainer owns (state_dict / load_state_dict)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.engine.test_trainer import ListSink
from tuitrain.core.config import Config
from tuitrain.core.errors import UserError
from tuitrain.engine import Control
from tuitrain.engine.setup import DistInfo, build_parts
from tuitrain.engine.strategy import DDPStrategy, Single, make_strategy
from tuitrain.engine.tasks.base import Task, TaskAdapter, as_task, batch_size_of
from tuitrain.engine.tasks.charlm import CharLMTask
from tuitrain.engine.tasks.classify import ClassifyTask
from tuitrain.engine.trainer import Trainer

ENGINE = Path(__file__).resolve().parents[2] / "tuitrain" / "engine"
CPU = torch.device("cpu")
BATCH = (torch.zeros(3, 2), torch.zeros(3))


# --------------------------------------------------------------------------- the task


class Bare:
    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return torch.tensor(1.0)


class Full(Bare):
    name = "full"
    primary = "mae"
    mode = "max"
    tolerance = 0.1
    metrics = {"mae": {"goal": "min"}}
    chance = {"loss": 2.0}

    def validation_step(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        return {"loss": torch.tensor(1.0), "mae": torch.tensor(0.5)}

    def batch_size(self, batch: Any) -> int:
        return 7

    def tokens(self, batch: Any) -> int:
        return 21

    def sample(self, model: nn.Module, device: torch.device) -> str:
        return "text"


def test_a_duck_typed_task_is_adapted_once_with_the_defaults() -> None:
    task = as_task(Bare(), "pkg.mod:bare")
    assert isinstance(task, TaskAdapter)
    assert (task.name, task.primary, task.mode, task.tolerance) == (
        "pkg.mod:bare",
        "loss",
        "min",
        None,
    )
    assert task.metrics == {} and task.chance == {}
    assert task.validation_step(nn.Identity(), BATCH) is None  # the training loss validates
    assert task.batch_size(BATCH) == 3  # the first tensor's first dimension
    assert task.tokens(BATCH) is None and not task.counts_tokens
    assert task.sample(nn.Identity(), CPU) is None


def test_a_duck_typed_task_keeps_everything_it_has() -> None:
    task = as_task(Full(), "pkg.mod:full")
    assert (task.name, task.primary, task.mode, task.tolerance) == ("full", "mae", "max", 0.1)
    assert task.chance == {"loss": 2.0} and task.metrics == {"mae": {"goal": "min"}}
    assert set(task.validation_step(nn.Identity(), BATCH) or {}) == {"loss", "mae"}
    assert task.batch_size(BATCH) == 7
    assert task.tokens(BATCH) == 21 and task.counts_tokens
    assert task.sample(nn.Identity(), CPU) == "text"


def test_a_subclass_is_taken_as_it_is() -> None:
    class Mine(Task):
        def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
            return torch.tensor(0.0)

        def tokens(self, batch: Any) -> int:
            return 5

    mine = Mine()
    assert as_task(mine, "x:y") is mine
    assert mine.counts_tokens  # overriding tokens is what counts them
    assert not ClassifyTask().counts_tokens and CharLMTask().counts_tokens
    assert ClassifyTask().logits and not CharLMTask().logits


def test_what_is_no_task_is_refused_in_one_sentence() -> None:
    with pytest.raises(UserError, match="without a training_step method"):
        as_task(object(), "x:y")
    with pytest.raises(UserError, match="does not override training_step"):
        as_task(Task(), "x:y")

    class Sideways(Bare):
        mode = "up"

    with pytest.raises(UserError, match="its mode is 'up'; use 'min' or 'max'"):
        as_task(Sideways(), "x:y")


def test_a_user_batch_size_or_validation_that_gives_none_is_named() -> None:
    class NoneSize(Bare):
        def batch_size(self, batch: Any) -> None:
            return None

        def validation_step(self, model: nn.Module, batch: Any) -> None:
            return None

    task = as_task(NoneSize(), "x:y")
    with pytest.raises(UserError, match=r"batch_size\(batch\) gave None; it must be an int"):
        batch_size_of(task, BATCH, "x")
    with pytest.raises(UserError, match="validation_step returned a NoneType"):
        task.validation_step(nn.Identity(), BATCH)
    with pytest.raises(UserError, match="a batch holds no tensor with a batch dimension"):
        batch_size_of(as_task(Bare(), "x:y"), ["no tensor"], "x")


def test_the_engine_never_probes_the_task() -> None:
    """One adapter looks up what a user's task has; the engine calls a Task's methods."""
    probes = ("getattr(task", "getattr(self.task", "getattr(p.task", "getattr(parts.task")
    for path in ENGINE.glob("*.py"):
        text = path.read_text()
        assert not any(probe in text for probe in probes), path.name
        assert "isinstance(task, ClassifyTask)" not in text, path.name
    assert "cross_entropy" not in (ENGINE / "flops.py").read_text()


# --------------------------------------------------------------------------- the strategy


def test_one_process_is_the_single_strategy() -> None:
    strategy = make_strategy(DistInfo(), CPU)
    assert type(strategy) is Single
    model = nn.Linear(2, 2)
    assert strategy.wrap(model) is model
    with strategy.no_sync(True):
        pass
    record: dict[str, Any] = {"loss": 1.0, "step_time_s": 0.1}
    assert strategy.gather_metrics(record, ()) is False
    assert record == {"loss": 1.0, "step_time_s": 0.1}  # as measured: nothing added
    assert list(strategy.model_state_dict()) == ["weight", "bias"]


def test_ddp_state_dicts_hold_plain_names(tmp_path: Path) -> None:
    """A checkpoint under DDP (and compile) names the plain module's weights: it loads into
    any strategy, and a plain one's loads into DDP."""
    assert not dist.is_initialized()
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        info = DistInfo(rank=0, world_size=2)  # what make_strategy looks at
        strategy = make_strategy(info, CPU)
        assert isinstance(strategy, DDPStrategy)
        model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        wrapped = strategy.wrap(model)
        assert any(k.startswith("module.") for k in wrapped.state_dict())
        state = strategy.model_state_dict()
        assert list(state) == list(model.state_dict())
        other = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
        strategy.load_model_state_dict(other.state_dict())
        assert torch.equal(model[0].weight, other[0].weight)
        assert strategy.no_sync(False).__class__.__name__ == "nullcontext"
        with strategy.no_sync(True):
            wrapped(torch.ones(4, 2)).sum().backward()
        assert model[0].weight.grad is not None
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- the state


def trainer_of(cfg: Config) -> Trainer:
    parts = build_parts(cfg, DistInfo())
    return Trainer(cfg, parts, ListSink(), Control(), DistInfo(), None)


def test_the_trainer_gives_and_takes_its_state(tiny_config) -> None:
    cfg = tiny_config("train.max_steps=3")
    first = trainer_of(cfg)
    first.fit()
    state = first.state_dict()
    assert state["step"] == 3 and state["world_size"] == 1
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in state["model"])
    second = trainer_of(cfg)
    second.load_state_dict(state)
    assert (second.step, second.epoch, second.epoch_step) == (3, first.epoch, first.epoch_step)
    assert second.last_saved_step == 3
    assert second.val_metrics == first.val_metrics and second.best == first.best
    for name, tensor in first.parts.model.state_dict().items():
        assert torch.equal(tensor, second.parts.model.state_dict()[name]), name
    again = second.state_dict()
    for key in ("step", "epoch", "epoch_step", "samples", "best", "evals_since_best"):
        assert again[key] == state[key], key
    assert math.isfinite(float(again["meter"]["loss_sum"]))
    own = first.rank_state_dict()
    assert set(own) == {"step", "rng", "meter"}
    second.load_rank_state_dict(own)


def test_state_does_not_import_the_trainer() -> None:
    code = (
        "import sys, tuitrain.engine.state, tuitrain.engine.checkpoint;"
        "print('tuitrain.engine.trainer' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
