"""torch.distributed under torchrun: process group, agreed commands, one collective per log.

Every rank runs the engine. Commands (stop, pause, checkpoint, profile) are agreed with an
all-reduce at the log cadence, so all ranks act at the same step and none waits forever in
a gradient all-reduce that the others have left. Metrics are gathered with one collective.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from tuitrain.engine.control import Control
from tuitrain.engine.setup import DistInfo
from tuitrain.metrics.records import RANK_MERGE

# command vector slots, reduced with MAX across ranks
_STOP, _PAUSE, _CHECKPOINT, _PROFILE = range(4)


def env_dist_info() -> DistInfo:
    """Rank and world size as torchrun sets them (single process when absent)."""
    return DistInfo(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def init_process_group(info: DistInfo, timeout_s: float, device_type: str) -> None:
    """nccl on CUDA (one device per local rank), gloo on CPU; a timeout from the config."""
    if info.world_size == 1 or dist.is_initialized():
        return
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
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
    time and own work per step (data wait + forward, `rank_busy_s`: the straggler measure)."""
    if info.world_size == 1:
        record["rank_step_time_s"] = [record["step_time_s"]]
        return
    # what each field becomes: RANK_MERGE in metrics/records.py; the task's own train metrics
    # are means over ranks, tokens/s a sum
    merge = dict(RANK_MERGE)
    for key in metric_names:
        merge[key] = "mean"
    if "tokens_per_s" in record:
        merge["tokens_per_s"] = "sum"
    fields = list(merge)
    record.setdefault("busy_s", None)
    values = [record[f] for f in fields]
    local = torch.tensor([float("nan") if v is None else float(v) for v in values], device=device)
    gathered = [torch.empty_like(local) for _ in range(info.world_size)]
    dist.all_gather(gathered, local)  # sync point: one collective per log interval
    rows = torch.stack(gathered).cpu()
    col = {f: rows[:, i] for i, f in enumerate(fields)}
    for key, how in merge.items():
        if how == "sum" and record[key] is not None:
            record[key] = float(col[key].sum())
        elif how == "mean" and record[key] is not None:
            record[key] = float(col[key].mean())
        elif how == "max" and record[key] is not None and key != "step_time_s":
            value = col[key].max()
            whole = key.endswith("_bytes") or key == "host_syncs"
            record[key] = int(value) if whole else float(value)
    if record["loss"] is not None and not torch.isfinite(col["loss"]).all():
        record["loss"] = None  # any rank's NaN is everyone's NaN
    record["rank_step_time_s"] = [float(v) for v in col["step_time_s"]]
    record["rank_busy_s"] = [float(v) for v in col["busy_s"]]  # data wait + forward per step
    del record["busy_s"]
    record["step_time_s"] = float(col["step_time_s"].max())
