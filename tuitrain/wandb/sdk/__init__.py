"""`wandb.sdk`: where the frameworks import wandb's run classes from (`wandb.sdk.lib.RunDisabled`,
`wandb.sdk.wandb_run.Run`, `wandb.sdk.lib.config_util.ConfigError`)."""

from tuitrain.wandb import wandb_run
from tuitrain.wandb.sdk import lib

__all__ = ["lib", "wandb_run"]
