"""torch.distributed under torchrun: process group, agreed commands, one collective per log.

Every rank runs the engine. Commands (stop, pause, checkpoint, profile) are agreed with an
all-reduce at the log cadence, so all ranks act at the same step and none waits forever in
a gradient all-reduce that the others have left. Metrics are gathered with one collective.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tuitrain.core.control import Control
from tuitrain.metrics.records import NODE_COLUMN, merge_ranks, rank_merge_fields


@dataclass(slots=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node: int = 0  # the node's index in the job (torchrun's GROUP_RANK)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


# command vector slots, reduced with MAX across ranks
_STOP, _PAUSE, _CHECKPOINT, _PROFILE = range(4)


def env_dist_info() -> DistInfo:
    """Rank, world size and node as torchrun sets them (single process when absent;
    GROUP_RANK is the node rank of this rank's agent)."""
    return DistInfo(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        node=int(os.environ.get("GROUP_RANK", "0")),
    )


def init_process_group(
    info: DistInfo, timeout_s: float, device_type: str, stacks: Path | None = None
) -> None:
    """nccl on CUDA (one device per local rank), gloo on CPU; a timeout from the config.
    NCCL: the Flight Recorder on, where the user has not set it (its dump on a collective's
    timeout goes beside the stalled-rank watch's stacks when the run dir is known here)."""
    if info.world_size == 1 or dist.is_initialized():
        return
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        from tuitrain.engine.rankwatch import flight_recorder_env

        flight_recorder_env(os.environ, stacks)
        torch.cuda.set_device(info.local_rank)
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(value: Any, info: DistInfo) -> Any:
    """Rank 0's value on every rank (run dir, config)."""
    if info.world_size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def farewell(info: DistInfo) -> None:
    """A last barrier before the process group goes: no rank closes its connections while
    another still talks on them (gloo aborts the process on a peer closed mid-operation)."""
    if info.world_size > 1 and dist.is_initialized():
        dist.barrier()


def agree_commands(control: Control, info: DistInfo, device: torch.device) -> dict[str, int]:
    """Every rank's pending requests, MAX-reduced: the same decision on every rank."""
    profile = control.take_profile_request()
    local = torch.tensor(
        [control.stop_requested, control.paused, control.take_checkpoint_request(), profile],
        dtype=torch.int64,
        device=device,
    )
    if info.world_size > 1:
        dist.all_reduce(local, op=dist.ReduceOp.MAX)  # sync point: at the log cadence only
    stop, pause, checkpoint, profile = (int(v) for v in local.tolist())
    if stop and not control.stop_requested:
        control.request_stop("stopped on another rank's request")
    return {"stop": stop, "pause": pause, "checkpoint": checkpoint, "profile": profile}


def gather_metrics(
    record: dict[str, Any],
    info: DistInfo,
    device: torch.device,
    metric_names: tuple[str, ...] = (),
) -> None:
    """One all-gather: global samples/s (sum), mean loss, largest memory, each rank's step
    time and own work per step (data wait + forward, `rank_busy_s`: the straggler measure),
    time in collectives, memory and node. What each field becomes is the contract's
    (`rank_merge_fields`, `merge_ranks` in metrics/records.py); the reductions run here, on
    the gathered float64 tensor (bytes stay exact to the byte below 2**53)."""
    if info.world_size == 1:
        merge_ranks(record, {"step_time_s": [record["step_time_s"]]})
        return
    fields = list(rank_merge_fields(record, metric_names))
    values = [record.get(f) for f in fields]  # busy_s: None (NaN) where this rank has none
    fields.append(NODE_COLUMN)
    values.append(info.node)
    floats = [float("nan") if v is None else float(v) for v in values]
    local = torch.tensor(floats, dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(info.world_size)]
    dist.all_gather(gathered, local)  # sync point: one collective per log interval
    rows = torch.stack(gathered).cpu()
    col = {f: rows[:, i] for i, f in enumerate(fields)}

    def reduce(key: str, how: str) -> float:
        column = col[key]
        if how == "sum":
            return float(column.sum())
        return float(column.mean() if how == "mean" else column.max())

    merge_ranks(record, {f: c.tolist() for f, c in col.items()}, reduce)
