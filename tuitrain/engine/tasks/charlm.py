"""The `charlm` task: next-character cross-entropy on a character-level text, in nats and
bits per character, and a short sample after each evaluation. Its data is data/text.py
(Shakespeare, shipped offline), its model models/gpt.py (`gpt`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tuitrain.engine.data.sources import mix_seed
from tuitrain.engine.data.text import Vocabulary
from tuitrain.engine.models.gpt import generate
from tuitrain.engine.tasks.base import Task

SAMPLE_PROMPT = "\n"  # generation starts a new speech; the model writes the speaker's name
SAMPLE_CHARS = 200


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
