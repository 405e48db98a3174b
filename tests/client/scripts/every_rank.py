"""The naive port of a one-process script to DDP: every rank calls tuitrain.init and log."""

import os

import torch
import torch.distributed as dist

import tuitrain

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
run = tuitrain.init(config={"lr": 0.05, "world": dist.get_world_size()})
torch.manual_seed(rank)
for _ in range(6):
    x = torch.randn(16, 8)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), x.sum(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    run.log({"loss": loss.detach(), "rank_seen": float(rank)})
dist.barrier()
run.finish()
dist.destroy_process_group()
print(f"rank {rank} of {os.environ['WORLD_SIZE']} done", flush=True)
