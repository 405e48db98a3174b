"""A 2-rank gloo job where every rank logs through tuitrain and rank 1 spends 30 ms more a
step outside the collective (a slower data source, a heavier preprocessing): under
synchronous data parallelism both ranks' step times are the same, only the time outside
collectives names rank 1."""

import os
import sys
import time

import torch
import torch.distributed as dist

import tuitrain

STEPS = 100
SLOW_S = float(os.environ.get("TUITRAIN_TEST_SLOW_S", "0.03"))

run_dir = sys.argv[1]
run = tuitrain.init(run_dir, flush_s=0.5)  # before the process group: timed from its making
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
torch.manual_seed(rank)
dist.barrier()  # rank 0 has named its run dir
for _ in range(STEPS):
    if rank == 1:
        time.sleep(SLOW_S)  # its own work, outside any collective
    x = torch.randn(16, 8)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), x.sum(1))
    opt.zero_grad()
    loss.backward()  # DDP's gradient all-reduce: rank 0 waits here for rank 1
    opt.step()
    total = loss.detach().clone()
    dist.all_reduce(total)  # the script's own collective
    run.log({"loss": total / dist.get_world_size()})
if rank != 0:
    run.finish()  # its last figures reach rank 0's run dir
dist.barrier()
if rank == 0:
    run.log({"loss": 0.0})  # a row after every rank's last report
    run.finish()
dist.destroy_process_group()
