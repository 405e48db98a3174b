"""The `charlm` task: a causal character-level transformer on Shakespeare, shipped offline.

The model is GPT-shaped (token and position embeddings, pre-norm blocks of causal
`scaled_dot_product_attention` and a 4x MLP, a final LayerNorm, the output head tied to the
token embedding); the text is nine plays (public domain) shipped in the package as
`tuitrain/data/shakespeare/shakespeare.txt.xz` (`scripts/make_shakespeare.py` says where it
came from). The last tenth of the text is the validation split, the rest trains.

A train epoch is the text cut into `context`-long windows at a per-epoch random offset,
visited in a seeded order (so the batch order depends only on seed and epoch, as for images,
and a resumed run continues exactly); validation is the val text's windows in order.
"""

from __future__ import annotations

import lzma
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tuitrain.core.errors import UserError
from tuitrain.engine.data import DataBundle, SourceContext, epoch_permutation, mix_seed
from tuitrain.engine.task import Task

TEXT_PATH = Path(__file__).resolve().parents[1] / "data" / "shakespeare" / "shakespeare.txt.xz"
VAL_SHARE = 0.1
SAMPLE_PROMPT = "\n"  # generation starts a new speech; the model writes the speaker's name
SAMPLE_CHARS = 200


# --------------------------------------------------------------------------- the text


def load_text() -> str:
    return lzma.decompress(TEXT_PATH.read_bytes()).decode("ascii")


class Vocabulary:
    """Characters <-> ids: the sorted set of the whole text's characters."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self._ids = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self._ids[c] for c in text if c in self._ids], dtype=torch.long)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


class TextSource:
    """One split of the text as (x, y) batches of `context` ids, y = x shifted by one."""

    def __init__(self, ids: torch.Tensor, ctx: SourceContext, *, train: bool) -> None:
        self._ids, self._ctx, self._train = ids.to(ctx.device), ctx, train
        self._t = ctx.cfg.context
        self._bs = ctx.batch_size(train)
        windows = (len(ids) - 1) // self._t  # at offset 0; a random offset keeps this many
        if train:
            windows = max(windows - 1, 0)  # room for an offset up to context - 1
        wanted = ctx.cfg.train_samples if train else ctx.cfg.val_samples
        self.dataset_size = min(windows, wanted) if wanted else windows
        split = "train" if train else "val"
        if self.dataset_size == 0:
            raise UserError(
                f"the '{split}' split of the text is {len(ids):,} characters, shorter than one"
                f" sequence of data.context = {self._t} + 1; lower data.context."
            )
        if train:
            self._per_rank = self.dataset_size // ctx.world_size
            self._batches = self._per_rank // self._bs
            if self._batches == 0:
                raise UserError(
                    f"the 'train' split of the text has {self._per_rank} sequences of"
                    f" {self._t} characters per rank, fewer than data.batch_size ="
                    f" {self._bs}; lower the batch size or data.context."
                )
            self.num_samples = self._batches * self._bs
        else:
            self._batches = math.ceil(self.dataset_size / self._bs)
            self.num_samples = self.dataset_size
        self._arange = torch.arange(self._t + 1, device=ctx.device)

    def __len__(self) -> int:
        return self._batches

    def indices(self, epoch: int) -> torch.Tensor:
        if not self._train:
            return torch.arange(self.dataset_size)
        perm = epoch_permutation(self.dataset_size, self._ctx.seed, epoch)
        return perm[self._ctx.rank :: self._ctx.world_size][: self.num_samples]

    def _offset(self, epoch: int) -> int:
        if not self._train:
            return 0
        generator = torch.Generator().manual_seed(mix_seed(self._ctx.seed, epoch, "offset"))
        return int(torch.randint(0, self._t, (1,), generator=generator))

    def batches(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        device = self._ctx.device
        order = self.indices(epoch).to(device, non_blocking=True)
        offset = self._offset(epoch)
        for b in range(start, self._batches):
            starts = order[b * self._bs : (b + 1) * self._bs] * self._t + offset
            rows = self._ids[starts[:, None] + self._arange]  # (B, context + 1)
            yield rows[:, :-1], rows[:, 1:]


def text_bundle(ctx: SourceContext) -> DataBundle:
    text = load_text()
    vocab = Vocabulary(text)
    ids = vocab.encode(text)
    cut = int(len(ids) * (1 - VAL_SHARE))
    train, val = TextSource(ids[:cut], ctx, train=True), TextSource(ids[cut:], ctx, train=False)
    description = (
        f"Shakespeare, nine plays shipped with tuitrain ({len(ids):,} characters, "
        f"{len(vocab)} distinct; {cut:,} train / {len(ids) - cut:,} val), "
        f"{ctx.cfg.context}-character sequences"
    )
    return DataBundle(train, val, len(vocab), (ctx.cfg.context,), description, vocabulary=vocab)


# --------------------------------------------------------------------------- the model


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
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
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


# --------------------------------------------------------------------------- the task


class CharLMTask(Task):
    """Next-character cross-entropy; val loss in nats per character and bits per character."""

    name = "charlm"
    primary = "loss"
    mode = "min"
    metrics = {
        "loss": {"goal": "min", "format": "float", "unit": "nats/char"},
        "bpc": {"goal": "min", "format": "float", "unit": "bits/char"},
    }

    def __init__(self, vocabulary: Vocabulary | None = None, seed: int = 0) -> None:
        self.vocabulary, self.seed = vocabulary, seed

    def training_step(self, model: nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    def validation_step(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = model(x).float()
        per_char = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")  # (B, T)
        per_seq = per_char.mean(dim=1)
        return {"loss": per_seq, "bpc": per_seq / math.log(2)}

    def tokens(self, batch: Any) -> int:
        return int(batch[0].numel())

    def sample(self, model: nn.Module, device: torch.device) -> str | None:
        """A short text from a fixed prompt, drawn from a generator seeded by the run's
        seed (the training RNG is untouched)."""
        if self.vocabulary is None:
            return None
        prompt = self.vocabulary.encode(SAMPLE_PROMPT).to(device)
        generator = torch.Generator().manual_seed(mix_seed(self.seed, "sample"))
        return self.vocabulary.decode(generate(model, prompt, SAMPLE_CHARS, generator))
