"""A script written for wandb, with one changed import."""

import torch

import tuitrain.wandb as wandb

torch.manual_seed(0)
wandb.init(project="demo", name="wandb-style", config={"lr": 0.05})
wandb.config.update({"batch": 32})
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=wandb.config.lr)
wandb.watch(model)  # not supported: a no-op that says so once
for step in range(30):
    x = torch.randn(wandb.config["batch"], 8)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), x.sum(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    wandb.log({"train/loss": loss, "throughput/examples": 32.0}, commit=False)
    wandb.log({"train/grad_scale_free": 1.0})
    if step % 10 == 9:
        wandb.log({"eval/loss": loss.item()})
wandb.summary["final"] = loss.item()
wandb.finish()
