"""What a checkpoint holds and how a trainer is put back exactly where it was.

The unwrapped model (no `_orig_mod.` or `module.` prefixes), optimizer, scheduler, GradScaler,
every RNG, the position (step, epoch, step within the epoch: the batch order depends only on
seed and epoch, so that is the whole data-order state) and the open log interval's loss sum,
so the first logged loss after a resume is bit-identical to the straight run's.

The trainer owns that state: `Trainer.state_dict()` gives it and `Trainer.load_state_dict()`
takes it back (engine/trainer.py); this module checks a checkpoint before a resume touches
anything (`check_resumable`), puts a trainer back with its rank's own part (`restore`) and
says what a change of world size changes. It never imports the trainer: `Resumable` is what
it asks of one.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from tuitrain.engine.checkpoint import (
    CheckpointError,
    check_compatible,
    load_rank_state,
    rng_state,
    set_rng_state,
)
from tuitrain.engine.distributed import DistInfo

if TYPE_CHECKING:  # annotations only (setup does not import this module: no circle)
    from tuitrain.core.config import Config
    from tuitrain.engine.setup import RunParts

FORMAT_VERSION = 1
SOURCE_KEY = "_loaded_from"  # set on a loaded state: where the ranks' own files are


class Resumable(Protocol):
    """What a resume needs of a trainer (engine/trainer.py's Trainer): its own state in and
    out (`state_dict`, `load_state_dict`, and a DDP rank's own part), and where it runs."""

    cfg: Config
    dist: DistInfo
    parts: RunParts
    step: int

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def rank_state_dict(self) -> dict[str, Any]: ...

    def load_rank_state_dict(self, state: dict[str, Any]) -> None: ...


def world_size_change(trainer: Resumable, state: dict[str, Any]) -> str | None:
    """What changes when a checkpoint saved by M ranks is resumed by N (None when M == N or
    the checkpoint predates the record of M)."""
    saved = state.get("world_size")
    now = trainer.dist.world_size
    if saved is None or int(saved) == now:
        return None
    cfg = trainer.cfg
    batch = cfg.data.batch_size * cfg.optim.grad_accum * now
    if batch == state.get("global_batch") and state.get("steps_per_epoch") == (
        trainer.parts.steps_per_epoch
    ):
        return (
            f"resumed with {now} rank(s) from a checkpoint saved by {saved}, with the same "
            f"global batch ({batch}): each step takes the same samples as it would have, so "
            "the run goes on as the uninterrupted one would, to rounding (dropout masks and "
            "the sums' order differ)"
        )
    return (
        f"resumed with {now} rank(s) from a checkpoint saved by {saved}: the global batch "
        f"changes from {state.get('global_batch', '?')} to {batch} and an epoch from "
        f"{state.get('steps_per_epoch', '?')} to {trainer.parts.steps_per_epoch} steps; the "
        f"position in epoch {state['epoch']} is kept as a step count ({state['epoch_step']}), "
        "so this epoch's remaining samples differ and the run is not bit-exact with an "
        "uninterrupted one; keep it with data.batch_size or optim.grad_accum (global batch "
        "= data.batch_size x optim.grad_accum x ranks)"
    )


POSITION_KEYS = ("step", "epoch", "epoch_step", "samples")


def check_resumable(cfg: Config, state: dict[str, Any]) -> None:
    """Everything `restore` will load, tried on a CPU copy of this run's model before the run
    dir is touched: a resume refused here writes nothing (not config.toml, not a record).
    Builds the data (to know the model's input) and the model once more: ~0.5 s."""
    where = f"checkpoint {state.get(SOURCE_KEY, '')}".rstrip()
    counts: dict[str, Any] = {key: state.get(key) for key in POSITION_KEYS}
    if state.get("world_size") is not None:  # older checkpoints have none
        counts["world_size"] = state["world_size"]
    if isinstance(state.get("steps_per_epoch"), int):
        counts["steps_per_epoch"] = state["steps_per_epoch"]
    for key, value in counts.items():
        low = 1 if key in ("world_size", "steps_per_epoch") else 0
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**53:
            raise CheckpointError(
                f"{where} has {key} = {value!r:.40}, not a count; it was altered or not "
                "written by tuitrain: resume from another checkpoint."
            )
    if "steps_per_epoch" in counts and counts["epoch_step"] > counts["steps_per_epoch"]:
        raise CheckpointError(
            f"{where} is at step {counts['epoch_step']} of an epoch of "
            f"{counts['steps_per_epoch']} steps; it was altered: resume from another checkpoint."
        )
    for key in [k for k in state if isinstance(k, str) and k.startswith("val_")]:
        if key == "val_metrics":
            continue
        value = state.get(key)
        if value is not None and not (is_number(value) and math.isfinite(value)):
            raise CheckpointError(
                f"{where} has {key} = {value!r:.40}, not a number; it was altered: resume "
                "from another checkpoint."
            )
    saved = rng_state()  # building a model draws from the RNGs: leave the caller's as they were
    try:
        _try_restore(cfg, state, where)
    finally:
        set_rng_state(saved)


def _try_restore(cfg: Config, state: dict[str, Any], where: str) -> None:
    from tuitrain.engine.data.build import build_data
    from tuitrain.engine.models.build import build_model
    from tuitrain.engine.setup import make_optimizer, make_schedule

    data = build_data(
        cfg.data, torch.device("cpu"), cfg.train.seed, classify=cfg.task.name == "classify"
    )
    model = build_model(
        cfg.model.name, data.num_classes, cfg.model.dropout, data.input_shape, cfg.model
    )
    try:
        check_compatible(state, model, cfg.name)
    except CheckpointError as exc:  # "checkpoint …" -> "checkpoint PATH …"
        raise CheckpointError(str(exc).replace("checkpoint", where, 1)) from None
    part = "model"
    try:
        model.load_state_dict(state["model"])
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"{name} holds NaN or infinite values")
        part = "optimizer"
        optimizer = make_optimizer(list(model.parameters()), cfg.optim)
        fresh = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
        # a deep copy: load_state_dict keeps the checkpoint's own tensors where dtype and
        # device match, and the trial step below would change the moments the run resumes
        optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        for group in optimizer.param_groups:
            for key, own in fresh.items():
                if not _same_kind(group.get(key), own):
                    raise ValueError(f"{key} = {group.get(key)!r:.40}")
        part = "scheduler"
        scheduler = state["scheduler"]
        if not isinstance(scheduler, dict) or not isinstance(scheduler.get("last_epoch"), int):
            raise ValueError("no last_epoch count")
        schedule = make_schedule(optimizer, cfg.optim, 1)
        schedule.load_state_dict(copy.deepcopy(scheduler))
        part = "optimizer"  # one step of the copy: what the first resumed step will do
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        part = "scheduler"
        schedule.step()
        if not all(is_number(lr) and math.isfinite(lr) for lr in schedule.get_last_lr()):
            raise ValueError(f"learning rates {schedule.get_last_lr()!r:.60}")
        part = "scaler"
        scaler = state.get("scaler")
        if scaler and not isinstance(scaler.get("scale"), (int, float)):
            raise ValueError("no scale")
        part = "RNG"
        set_rng_state(state["rng"])  # the caller puts its own back
        part = "loss window"
        meter = state["meter"]
        loss_sum, skipped, micro = meter["loss_sum"], meter["skipped"], meter["micro_batches"]
        if not (
            isinstance(loss_sum, torch.Tensor)
            and loss_sum.dim() == 0
            and loss_sum.is_floating_point()
            and bool(torch.isfinite(loss_sum))
            and isinstance(skipped, torch.Tensor)
            and skipped.dim() == 0
            and not skipped.is_floating_point()
            and not skipped.is_complex()
            and isinstance(micro, int)
            and not isinstance(micro, bool)
            and 0 <= micro < 2**53
        ):
            raise ValueError("not a loss window")
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - however it fails, that part of the file is bad
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise CheckpointError(
            f"{where}: its {part} state does not load into this run ({detail}); it was "
            "altered or saved by another version: resume from another checkpoint."
        ) from None


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same_kind(value: object, own: object) -> bool:
    """An optimizer group's loaded setting against this run's own: a finite number where a
    number goes, a flag where a flag goes, a tuple of numbers (betas) of the same length."""
    if own is None or isinstance(own, str):
        return True
    if isinstance(own, bool):
        return isinstance(value, bool)
    if isinstance(own, (tuple, list)):
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(own)
            and all(_same_kind(v, o) for v, o in zip(value, own, strict=True))
        )
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and bool(torch.isfinite(value).all())
    return is_number(value) and math.isfinite(value)  # type: ignore[arg-type]


def merged_window(state: dict[str, Any], ranks: int) -> Any:
    """One process resuming `ranks` ranks' checkpoint: the open log interval's loss window
    as the mean of every rank's (the record that closes it is the ranks' mean), so the first
    logged loss is the one the ranks would have logged. Rank 0's alone where another rank's
    state is missing or of another step or window."""
    meter = state["meter"]
    source = state.get(SOURCE_KEY)
    if not source:
        return meter
    sums = [meter["loss_sum"]]
    for rank in range(1, ranks):
        own = load_rank_state(Path(source), rank)
        other = own.get("meter") if isinstance(own, dict) else None
        if (
            not isinstance(other, dict)
            or own.get("step") != state.get("step")  # type: ignore[union-attr]
            or other.get("micro_batches") != meter["micro_batches"]
            or not isinstance(other.get("loss_sum"), torch.Tensor)
            or other["loss_sum"].shape != meter["loss_sum"].shape
        ):
            return meter
        sums.append(other["loss_sum"])
    return {
        **meter,
        "loss_sum": torch.stack([t.double() for t in sums]).mean().to(meter["loss_sum"].dtype),
    }


def restore(trainer: Resumable, state: dict[str, Any]) -> str | None:
    """Put `trainer` back at the checkpoint (its `load_state_dict`), and a DDP rank other
    than 0 at its own state saved beside it; returns a warning when that is missing (the
    resume is then not bit-exact on this rank)."""
    saved = state.get("world_size")
    if trainer.dist.world_size == 1 and isinstance(saved, int) and saved > 1:
        state = {**state, "meter": merged_window(state, saved)}
    trainer.load_state_dict(state)
    rank = trainer.dist.rank
    if rank == 0:
        return None
    source = state.get(SOURCE_KEY)
    own = load_rank_state(Path(source), rank) if source else None
    if own is None or int(own.get("step", -1)) != trainer.step:
        return (
            f"rank {rank} has no state of its own saved with this checkpoint: it resumes "
            "with rank 0's RNG, so its dropout masks (and the first logged loss) differ from "
            "an uninterrupted run"
        )
    trainer.load_rank_state_dict(own)
    return None
