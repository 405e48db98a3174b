"""The training engine: device, precision, data, models, the loop and its telemetry.

Never imports Textual or Rich: it runs headless, under torchrun and behind the UI alike.
"""

from tuitrain.engine.control import Control
from tuitrain.engine.trainer import RunResult, run

__all__ = ["Control", "RunResult", "run"]
