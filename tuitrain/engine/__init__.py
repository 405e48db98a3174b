"""The training engine: device, precision, data, models, the loop and its telemetry.

Never imports Textual or Rich: it runs headless, under torchrun and behind the UI alike.
Names are loaded lazily so that `tuitrain.core.control` and friends don't pull in torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuitrain.core.control import Control
    from tuitrain.engine.runner import RunResult, run

__all__ = ["Control", "RunResult", "run"]


def __getattr__(name: str) -> Any:
    if name == "Control":
        from tuitrain.core.control import Control

        return Control
    if name in ("RunResult", "run"):
        from tuitrain.engine import runner

        return getattr(runner, name)
    raise AttributeError(name)
