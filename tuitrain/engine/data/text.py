"""The `charlm` task's data: a character-level text as sequences of ids. The text is nine plays
(public domain) shipped in the package as `tuitrain/data/shakespeare/shakespeare.txt.xz`
(`scripts/make_shakespeare.py` says where it came from). The last tenth of the text is the
validation split, the rest trains.

A train epoch is the text cut into `context`-long windows at a per-epoch random offset,
visited in a seeded order (so the batch order depends only on seed and epoch, as for images,
and a resumed run continues exactly); validation is the val text's windows in order.
"""

from __future__ import annotations

import lzma
import math
from collections.abc import Iterator
from pathlib import Path

import torch

from tuitrain.core.errors import UserError
from tuitrain.engine.data.sources import DataBundle, SourceContext, epoch_permutation, mix_seed

TEXT_PATH = Path(__file__).resolve().parents[2] / "data" / "shakespeare" / "shakespeare.txt.xz"
VAL_SHARE = 0.1


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
