"""A hand-written loop logging through tuitrain's client (tests run it under `tuitrain run`)."""

import sys

import torch

import tuitrain

torch.manual_seed(0)
run = tuitrain.init(config={"lr": 0.05, "steps": 40})
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
w = torch.linspace(-1, 1, 8)
for step in range(40):
    x = torch.randn(32, 8)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), x @ w)
    opt.zero_grad()
    loss.backward()
    opt.step()
    run.log({"loss": loss.detach(), "lr": 0.05, "weight_norm": model.weight.norm().detach()})
    if step % 10 == 9:
        run.log({"val/loss": loss.item() * 1.05, "val/mae": loss.sqrt().item()}, step=step)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
if "--crash" in sys.argv:
    raise RuntimeError("the loader ran dry at step 40")
run.finish()
