"""A torchrun worker for test_fsdp_fp16.py: FSDPStrategy with fp16 (its ShardedGradScaler) on
two gloo ranks; an inf put into rank 1's shard of one gradient must skip the step on both
ranks and halve the scale on both; the next, clean step steps on both. Prints one RESULT
line of JSON per rank."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch import nn

from tuitrain.engine.distributed import DistInfo
from tuitrain.engine.precision import make_precision
from tuitrain.engine.strategy import FSDPStrategy


def step(model, strategy, precision, optimizer, poison: bool) -> dict:  # type: ignore[no-untyped-def]
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = model(torch.ones(4, 6)).float().pow(2).mean()
    precision.scale(loss).backward()
    grad = model[0].weight.grad
    if poison and dist.get_rank() == 1:
        grad._local_tensor[0, 0] = float("inf")  # this rank's shard only
    precision.unscale_(optimizer)
    norm = strategy.clip_grad_norm_(model.parameters(), 1.0)
    before = strategy.model_state_dict(everywhere=True)
    precision.step(optimizer)
    after = strategy.model_state_dict(everywhere=True)
    return {
        "stepped": any(not torch.equal(before[k], after[k]) for k in before),
        "scale": float(precision.scaler.get_scale()),
        "norm_finite": bool(torch.isfinite(norm)),
        "grad_dtype": str(grad.dtype),
        "sharded": type(grad).__name__,
    }


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    info = DistInfo(rank=dist.get_rank(), world_size=2)
    strategy = FSDPStrategy(info, torch.device("cpu"), "fp16")
    strategy.wrap(model)
    precision = make_precision("fp16", torch.device("cpu"), sharded=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    results = [step(model, strategy, precision, optimizer, poison) for poison in (True, False)]
    line = "RESULT " + json.dumps({"rank": dist.get_rank(), "steps": results}) + "\n"
    os.write(1, line.encode())  # one write of < PIPE_BUF: the two ranks' lines never interleave
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
