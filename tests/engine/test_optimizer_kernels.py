"""The optimizer's kernels: fused on CUDA (no GradScaler host sync), foreach elsewhere, and a
resumed checkpoint keeps this run's choice."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tuitrain.core.config import load_preset
from tuitrain.engine import setup
from tuitrain.engine.setup import make_optimizer, optimizer_kernels


def test_fused_on_cuda_foreach_elsewhere() -> None:
    assert optimizer_kernels("cuda") == {"fused": True}
    assert optimizer_kernels("cpu") == {"foreach": True}
    assert optimizer_kernels("mps") == {"foreach": True}


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_cpu_optimizer_is_foreach(name: str) -> None:
    cfg = load_preset("fashion-mini", [f'optim.name="{name}"']).optim
    optimizer = make_optimizer(list(nn.Linear(4, 3).parameters()), cfg)
    group = optimizer.param_groups[0]
    assert group["foreach"] is True and not group["fused"]
    assert not getattr(optimizer, "_step_supports_amp_scaling", False)


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_fused_choice_reaches_the_optimizer(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What CUDA gets, built on the CPU (torch has fused CPU kernels for both)."""
    monkeypatch.setattr(setup, "optimizer_kernels", lambda _device_type: {"fused": True})
    cfg = load_preset("fashion-mini", [f'optim.name="{name}"']).optim
    optimizer = make_optimizer(list(nn.Linear(4, 3).parameters()), cfg)
    assert optimizer.param_groups[0]["fused"] is True
    assert not optimizer.param_groups[0]["foreach"]
    # what lets GradScaler.step skip its found_inf.item(): it hands the tensor to the kernel
    assert optimizer._step_supports_amp_scaling is True


def fp16_scaled_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The engine's fp16 step order on the CPU: scale, backward, unscale, step, update."""
    scaler = torch.amp.GradScaler("cpu")
    loss = model(torch.ones(2, 4)).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()


def foreach_checkpoint(model: nn.Module) -> dict:
    saved = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    model(torch.ones(2, 4)).sum().backward()
    saved.step()
    saved.zero_grad()
    return saved.state_dict()


def test_resume_keeps_the_fused_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint from a foreach run loads into a fused-built optimizer and steps fused."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    state = foreach_checkpoint(model)
    monkeypatch.setattr(setup, "optimizer_kernels", lambda _device_type: {"fused": True})
    optimizer = make_optimizer(list(model.parameters()), load_preset("fashion-mini").optim)
    optimizer.load_state_dict(state)
    group = optimizer.param_groups[0]
    assert group["fused"] is True and group["foreach"] is None
    steps = [s["step"] for s in optimizer.state.values()]
    assert steps and all(s.dtype == torch.float32 and float(s) == 1.0 for s in steps)
    assert state["param_groups"][0]["foreach"] is True  # the caller's dict is left alone
    before = [p.detach().clone() for p in model.parameters()]
    fp16_scaled_step(model, optimizer)
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert all(float(s) == 2.0 for s in (s["step"] for s in optimizer.state.values()))


def test_without_the_hook_a_resumed_fused_optimizer_breaks() -> None:
    """Why the hook exists: torch takes the checkpoint's flags, and the scaler then hands
    found_inf to the foreach path, which refuses it."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    state = foreach_checkpoint(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    optimizer.load_state_dict(state)
    assert optimizer.param_groups[0]["foreach"] is True
    with pytest.raises(AssertionError, match="grad_scale and found_inf"):
        fp16_scaled_step(model, optimizer)
