"""The train and val batch sources named by `data.name`."""

from __future__ import annotations

import torch

from tuitrain.core.config import DataConfig
from tuitrain.core.errors import UserError
from tuitrain.engine.data.fashion import fashion_bundle, synthetic_bundle
from tuitrain.engine.data.idx import Log
from tuitrain.engine.data.loader import user_bundle
from tuitrain.engine.data.sources import DataBundle, SourceContext
from tuitrain.engine.data.text import text_bundle


def build_data(
    cfg: DataConfig, device: torch.device, seed: int, rank: int = 0, world_size: int = 1,
    channels_last: bool = False, *, log: Log | None = None, classify: bool = True,
) -> DataBundle:  # fmt: skip
    """Train and val batch sources for `cfg.name`, sharded for `rank` of `world_size`.

    `log` receives the rare status line worth showing (a download starting); the engine
    never prints, so the UI decides where it goes.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    ctx = SourceContext(cfg, torch.device(device), seed, rank, world_size, channels_last, classify)
    if cfg.name == "synthetic":
        return synthetic_bundle(ctx)
    if cfg.name in ("fashion_mnist", "fashion_mini"):
        return fashion_bundle(ctx, log)
    if cfg.name == "shakespeare":
        return text_bundle(ctx)
    if ":" in cfg.name:
        return user_bundle(ctx)
    raise UserError(
        f"data.name = {cfg.name!r} is unknown; use fashion_mnist, fashion_mini, synthetic,"
        " shakespeare or a factory 'package.module:function'."
    )
