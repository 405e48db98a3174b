"""charlm-fast (issue #40): its precision is bf16 only where bf16 is native, and the gpt
model's attention takes SDPA's math backend on a CPU in bf16 (the flash CPU kernel is the
slower there) and the flash kernel in fp32, with the same results either way."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from tuitrain.core.config import load_preset
from tuitrain.engine import precision
from tuitrain.engine.models.gpt import Block

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


@pytest.mark.parametrize(("native", "picked"), [(True, "bf16"), (False, "fp32")])
def test_charlm_fast_picks_bf16_only_where_native(
    native: bool, picked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_preset("charlm-fast")
    assert cfg.train.precision == "auto" and cfg.train.compile == "off"
    monkeypatch.setattr(precision, "bf16_supported", lambda _device: native)
    assert precision.resolve_precision(cfg.train.precision, torch.device("cpu")) == picked


def ops_of(block: Block, x: torch.Tensor, dtype: torch.dtype | None) -> set[str]:
    autocast = torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)
    with profile(activities=[ProfilerActivity.CPU]) as prof, autocast:
        block(x).float().sum().backward()
    return {event.key for event in prof.key_averages()}


def test_attention_is_math_in_cpu_bf16_and_flash_in_fp32() -> None:
    torch.manual_seed(0)
    block = Block(width=32, heads=2, dropout=0.0)
    x = torch.randn(4, 16, 32)
    assert FLASH in ops_of(block, x, None)
    assert FLASH not in ops_of(block, x, torch.bfloat16)


def test_math_and_flash_attention_agree_in_bf16() -> None:
    """The backend changes the kernel, not the numbers: the block's bf16 output through the
    math backend (what it runs) matches the flash kernel's to bf16 rounding."""
    torch.manual_seed(0)
    block = Block(width=32, heads=2, dropout=0.0)
    x = torch.randn(4, 16, 32)
    full = block(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = block(x).float()
        q, k, v = (torch.randn(4, 2, 16, 16).bfloat16() for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            flash = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
        with sdpa_kernel(SDPBackend.MATH):
            math = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    torch.testing.assert_close(ours, full, rtol=5e-2, atol=5e-2)  # the bf16 block is the block
    torch.testing.assert_close(math, flash, rtol=2e-2, atol=2e-2)
