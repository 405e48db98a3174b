"""What a checkpoint holds and how a trainer is put back exactly where it was.

The unwrapped model (no `_orig_mod.` or `module.` prefixes), optimizer, scheduler, GradScaler,
every RNG, the position (step, epoch, step within the epoch: the batch order depends only on
seed and epoch, so that is the whole data-order state) and the open log interval's loss sum,
so the first logged loss after a resume is bit-identical to the straight run's.
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any

import torch

import tuitrain
from tuitrain.engine.checkpoint import check_compatible, rng_state, set_rng_state

if TYPE_CHECKING:
    from tuitrain.engine.loop import Trainer

FORMAT_VERSION = 1


def capture(trainer: Trainer) -> dict[str, Any]:
    p = trainer.parts
    scaler = p.precision.scaler
    return {
        "format": FORMAT_VERSION,
        "preset": trainer.cfg.name,
        "config": trainer.cfg.to_dict(),
        "versions": {
            "torch": str(torch.__version__),
            "tuitrain": tuitrain.__version__,
            "python": platform.python_version(),
        },
        "step": trainer.step,
        "epoch": trainer.epoch,
        "epoch_step": trainer.epoch_step,
        "samples": trainer.samples,
        "val_acc": trainer.val_acc,
        "val_loss": trainer.val_loss,
        "model": p.model.state_dict(),  # the plain module, never the compiled/DDP wrapper
        "optimizer": p.optimizer.state_dict(),
        "scheduler": p.scheduler.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": rng_state(),
        "meter": trainer.meter.state_dict(),
    }


def restore(trainer: Trainer, state: dict[str, Any]) -> None:
    p = trainer.parts
    check_compatible(state, p.model, trainer.cfg.name)
    p.model.load_state_dict(state["model"])
    p.optimizer.load_state_dict(state["optimizer"])
    p.scheduler.load_state_dict(state["scheduler"])
    if p.precision.scaler is not None and state.get("scaler"):
        p.precision.scaler.load_state_dict(state["scaler"])
    set_rng_state(state["rng"])
    trainer.step = int(state["step"])
    trainer.epoch = int(state["epoch"])
    trainer.epoch_step = int(state["epoch_step"])
    trainer.samples = int(state["samples"])
    trainer.val_acc = state.get("val_acc")
    trainer.val_loss = state.get("val_loss")
    trainer.meter.load_state_dict(state["meter"])
    trainer.last_saved_step = trainer.step
