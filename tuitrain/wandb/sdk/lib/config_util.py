"""`wandb.sdk.lib.config_util`: `ConfigError` (HF's WandbCallback catches it; never raised)."""

from tuitrain.wandb._shared import ConfigError

__all__ = ["ConfigError"]
