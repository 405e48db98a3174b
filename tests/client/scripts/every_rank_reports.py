"""Every rank calls tuitrain.init and log in a 2-rank DDP job (gloo); rank 1 is made slower
and heavier, so its own figures are told apart from rank 0's in the run."""

import os
import sys
import time

import torch
import torch.distributed as dist

import tuitrain

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
run_dir = sys.argv[1] if len(sys.argv) > 1 else None
run = tuitrain.init(run_dir, config={"world": dist.get_world_size()})
dist.barrier()  # rank 0 has named its run dir
ballast = b"\x01" * (64 << 20) if rank == 1 else b""  # rank 1 holds 64 MiB more
torch.manual_seed(rank)
for _ in range(30):
    x = torch.randn(16, 8)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), x.sum(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 1:
        time.sleep(0.02)  # rank 1 does more before it logs
    run.log({"loss": loss.detach()})
if rank != 0:
    run.finish()  # its last figures reach rank 0's run dir
dist.barrier()
if rank == 0:
    run.log({"loss": 0.0})  # a row after every rank's last report
    run.finish()
dist.destroy_process_group()
print(f"rank {rank} of {os.environ['WORLD_SIZE']} done {len(ballast)}", flush=True)
