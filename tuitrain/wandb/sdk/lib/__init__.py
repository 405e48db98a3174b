"""`wandb.sdk.lib`: `RunDisabled` (Lightning's isinstance check) and `config_util`."""

from tuitrain.wandb.sdk.lib import config_util
from tuitrain.wandb.wandb_run import RunDisabled

__all__ = ["RunDisabled", "config_util"]
