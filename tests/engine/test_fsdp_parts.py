"""FSDP's pieces that need no process group: the config key, the blocks it shards, the
precision policy and scaler it takes, and the optimizer state's two numberings (names <->
the optimizer's own)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tuitrain.core.config import ConfigError, config_from_dict, load_preset
from tuitrain.engine.distributed import DistInfo
from tuitrain.engine.models.gpt import CharGPT
from tuitrain.engine.strategy import (
    DDPStrategy,
    Single,
    fsdp_blocks,
    fsdp_mixed_precision,
    make_strategy,
    named_optimizer_state,
    numbered_optimizer_state,
)


def test_strategy_key_defaults_to_ddp_and_names_the_choices() -> None:
    assert load_preset("fashion-mini").distributed.strategy == "ddp"
    cfg = load_preset("fashion-mini", ['distributed.strategy="fsdp"'])
    assert cfg.distributed.strategy == "fsdp"
    with pytest.raises(ConfigError) as err:
        config_from_dict({"distributed": {"strategy": "zero3"}})
    assert str(err.value) == (
        "distributed.strategy = 'zero3' is not valid; choose one of 'ddp', 'fsdp'."
    )


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.act = nn.ReLU()  # no parameters: not a unit
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.stem(x))
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_default_blocks_are_the_children_with_parameters_a_list_opened() -> None:
    net = Net()
    assert fsdp_blocks(net) == [net.stem, net.layers[0], net.layers[1], net.head]


def test_a_model_names_its_blocks() -> None:
    gpt = CharGPT(vocab=10, context=8, layers=3, heads=2, width=16, dropout=0.0)
    assert fsdp_blocks(gpt) == list(gpt.blocks)

    class Named(Net):
        def fsdp_blocks(self) -> list[nn.Module]:
            return [self.head]

    named = Named()
    assert fsdp_blocks(named) == [named.head]


def test_precision_policy_and_the_scaler_that_agrees_over_the_shards() -> None:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    from tuitrain.engine.precision import make_precision
    from tuitrain.engine.strategy import sharded_gradients

    assert fsdp_mixed_precision("fp32") is None
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        policy = fsdp_mixed_precision(name)
        assert policy.param_dtype == dtype and policy.reduce_dtype == torch.float32
    assert sharded_gradients("fsdp", 2)
    assert not sharded_gradients("fsdp", 1) and not sharded_gradients("ddp", 2)
    cpu = torch.device("cpu")
    assert type(make_precision("fp16", cpu, sharded=True).scaler) is ShardedGradScaler
    assert type(make_precision("fp16", cpu).scaler) is torch.amp.GradScaler
    assert make_precision("bf16", cpu, sharded=True).scaler is None


def test_one_process_is_single_whatever_the_key_says() -> None:
    cpu = torch.device("cpu")
    assert type(make_strategy(DistInfo(), cpu, "fsdp", "fp16")) is Single
    assert type(make_strategy(DistInfo(rank=0, world_size=2), cpu, "ddp")) is DDPStrategy


def test_optimizer_state_round_trips_between_names_and_numbers() -> None:
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    net(torch.ones(3, 4)).sum().backward()
    opt.step()
    plain = opt.state_dict()
    named = named_optimizer_state(net, opt, plain)
    assert list(named["state"])[0] == "stem.weight"
    assert named["param_groups"][0]["params"][:2] == ["stem.weight", "stem.bias"]
    back = numbered_optimizer_state(named)
    assert back["param_groups"] == plain["param_groups"]
    assert back["state"].keys() == plain["state"].keys()
    for i, st in plain["state"].items():
        assert all(torch.equal(st[k], back["state"][i][k]) for k in st)
    assert numbered_optimizer_state({}) == {}  # a rank other than 0 gets nothing to number
