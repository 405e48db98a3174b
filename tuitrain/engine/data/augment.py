"""Train-time augmentation on the device batch: random crops after zero padding, and flips.

The draws are made once per epoch on the CPU by a generator seeded from (seed, epoch, rank),
the same way the batch order is, and copied to the device with it. So:

* a resumed run (any batch of any epoch) sees exactly the crops and flips it would have seen
  without the stop: nothing has to be saved, the draws are a function of the position;
* the draws never touch the global RNG, so dropout and the model's init do not move when
  augmentation is switched on or off;
* a batch is one `pad` and one `gather` on the device: no per-sample Python, no host sync.

It works on the raw batch (uint8 for the built-in data sets), before normalisation, so the
padding is black (0), as torchvision's `RandomCrop(padding=p)` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional

from tuitrain.core.config import DataConfig
from tuitrain.engine.data.sources import mix_seed


@dataclass(frozen=True)
class Draws:
    """One epoch's crop offsets and flips for every sample of this rank, on the device."""

    augment: Augment
    dy: torch.Tensor  # int64 (N,), in [0, 2 * padding]
    dx: torch.Tensor  # int64 (N,)
    flip: torch.Tensor  # bool (N,)

    def __call__(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Samples start..start+len(x) of the epoch, cropped and flipped (same dtype)."""
        return self.augment.apply(x, self, start)


class Augment:
    """Random crop (zero padding `padding` pixels per side) and left-right flip (p = 1/2)."""

    def __init__(self, padding: int, hflip: bool, seed: int, rank: int) -> None:
        self.padding, self.hflip, self._seed, self._rank = padding, hflip, seed, rank

    @classmethod
    def from_config(cls, cfg: DataConfig, seed: int, rank: int) -> Augment | None:
        if cfg.crop_padding == 0 and not cfg.hflip:
            return None
        return cls(cfg.crop_padding, cfg.hflip, seed, rank)

    def describe(self) -> str:
        parts = []
        if self.padding:
            parts.append(f"random crop ±{self.padding} px")
        if self.hflip:
            parts.append("h-flip")
        return " + ".join(parts)

    def draws(self, epoch: int, n: int, device: torch.device) -> Draws:
        """The draws of `epoch` for this rank's `n` samples (CPU generator, one copy)."""
        generator = torch.Generator().manual_seed(mix_seed(self._seed, epoch, self._rank, "aug"))
        span = 2 * self.padding + 1
        packed = torch.stack(
            [
                torch.randint(0, span, (n,), generator=generator),
                torch.randint(0, span, (n,), generator=generator),
                torch.randint(0, 2 if self.hflip else 1, (n,), generator=generator),
            ]
        )
        if device.type == "cuda":
            packed = packed.pin_memory()
        packed = packed.to(device, non_blocking=True)
        return Draws(self, packed[0], packed[1], packed[2].bool())

    def apply(self, x: torch.Tensor, draws: Draws, start: int) -> torch.Tensor:
        """Samples start..start+len(x) of the epoch, cropped and flipped (same dtype)."""
        b, c, h, w = x.shape
        p = self.padding
        dy, dx = draws.dy[start : start + b], draws.dx[start : start + b]
        flip = draws.flip[start : start + b]
        rows = dy[:, None] + torch.arange(h, device=x.device)  # (B, H), in padded coordinates
        cols = torch.arange(w, device=x.device)
        cols = torch.where(flip[:, None], cols.flip(0), cols) + dx[:, None]  # (B, W)
        padded = functional.pad(x, (p, p, p, p)) if p else x
        index = (rows[:, :, None] * (w + 2 * p) + cols[:, None, :]).reshape(b, 1, h * w)
        out = padded.reshape(b, c, -1).gather(2, index.expand(b, c, h * w))
        return out.reshape(b, c, h, w)
