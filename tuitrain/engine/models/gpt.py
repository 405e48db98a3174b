"""The `gpt` model: a causal character-level transformer, GPT-shaped (token and position
embeddings, pre-norm blocks of causal `scaled_dot_product_attention` and a 4x MLP, a final
LayerNorm, the output head tied to the token embedding), and sampling from it.

On a CPU under bf16 autocast the attention runs SDPA's math backend: the flash CPU kernel
torch picks there took 2.3x the math backend's time in bf16 (forward + backward, 32 x 4
heads x 64 positions x 32; 2x at 128 positions), while in fp32 flash stays the faster one
(0.7x of math) and stays the choice (BENCHMARKS.md, issue #40)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tuitrain.core.errors import UserError


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        if q.device.type == "cpu" and q.dtype == torch.bfloat16:
            with sdpa_kernel(SDPBackend.MATH):  # the CPU's bf16 flash kernel is the slower
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))
        return x + self.drop(self.mlp(self.ln2(x)))


class CharGPT(nn.Module):
    """A causal transformer over characters: (B, T) ids -> (B, T, vocab) logits."""

    def __init__(
        self, vocab: int, context: int, layers: int, heads: int, width: int, dropout: float
    ) -> None:
        super().__init__()
        if width % heads:
            raise UserError(
                f"model.width = {width} is not a multiple of model.heads = {heads}; "
                "each head takes width / heads channels."
            )
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual outputs
            if name.endswith(("proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    def fsdp_blocks(self) -> list[nn.Module]:
        """The units FSDP shards one by one (distributed.strategy = "fsdp"): the blocks."""
        return list(self.blocks)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        x = self.drop(self.tok(ids) + self.pos(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


@torch.no_grad()
def generate(
    model: nn.Module, prompt: torch.Tensor, chars: int, generator: torch.Generator
) -> list[int]:
    """Sample `chars` ids after `prompt` (1-D ids), temperature 1, from a seeded generator."""
    context = getattr(model, "context", prompt.numel())
    ids = prompt[None, :]
    out: list[int] = []
    for _ in range(chars):
        logits = model(ids[:, -context:])[:, -1, :].float()
        probs = torch.softmax(logits, dim=-1)
        nxt = torch.multinomial(probs.cpu(), 1, generator=generator).to(ids.device)
        ids = torch.cat([ids, nxt], dim=1)
        out.append(int(nxt))
    return out
