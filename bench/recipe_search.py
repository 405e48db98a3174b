"""Recipe search for the fashion presets: the seeds' CNN on the full Fashion-MNIST, one seed.

A bare loop (not the engine) so several variants run side by side, one torch thread each:

    python bench/recipe_search.py --bs 64 --lr 2e-3 --dropout 0.25 --flip 1 --ls 0.1 --tag F

prints the test accuracy after each epoch and a RESULT line (JSON). The variants it compared
and what they reached are in BENCHMARKS.md ("Fashion presets: 10-epoch accuracy"); the
presets' figures themselves come from the engine (`bench/preset_accuracy.py`).
"""

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuitrain.engine.data.idx import locate_fashion_mnist, read_split
from tuitrain.engine.models.vision import FashionCNN

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--wd", type=float, default=1e-4)
p.add_argument("--bs", type=int, default=256)
p.add_argument("--epochs", type=int, default=10)
p.add_argument("--ls", type=float, default=0.0)
p.add_argument("--pad", type=int, default=0)
p.add_argument("--flip", type=int, default=0)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--dropout", type=float, default=0.5)
p.add_argument("--warmup", type=int, default=50)
p.add_argument("--min_lr", type=float, default=0.0)
p.add_argument("--tag", default="")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--opt", default="adamw")
p.add_argument("--ema", type=float, default=0.0)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
folder = locate_fashion_mnist("")
xtr, ytr = read_split(folder, "train")
xte, yte = read_split(folder, "val")
xtr = xtr.unsqueeze(1)
xte = xte.unsqueeze(1)
M, S = 0.2860, 0.3530


def norm(x):
    return x.float().mul_(1 / (255 * S)).add_(-M / S)


def augment(x, g):
    B, C, H, W = x.shape
    if a.pad:
        xp = F.pad(x, (a.pad,) * 4)
        oy = torch.randint(0, 2 * a.pad + 1, (B,), generator=g)
        ox = torch.randint(0, 2 * a.pad + 1, (B,), generator=g)
    else:
        xp = x
        oy = ox = torch.zeros(B, dtype=torch.long)
    rows = oy[:, None] + torch.arange(H)
    cols = ox[:, None] + torch.arange(W)
    if a.flip:
        f = torch.rand(B, generator=g) < 0.5
        cols = torch.where(f[:, None], cols.flip(1), cols)
    return xp[torch.arange(B)[:, None, None], 0, rows[:, :, None], cols[:, None, :]].unsqueeze(1)


model = FashionCNN(10, a.dropout)
opt = (
    torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.wd)
    if a.opt == "adamw"
    else torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=a.wd)
)
ema = copy.deepcopy(model) if a.ema else None
steps_per = len(ytr) // a.bs
total = steps_per * a.epochs


def factor(step):
    if step < a.warmup:
        return (step + 1) / a.warmup
    pr = min((step - a.warmup) / max(total - a.warmup, 1), 1.0)
    return a.min_lr + (1 - a.min_lr) * 0.5 * (1 + math.cos(math.pi * pr))


sch = torch.optim.lr_scheduler.LambdaLR(opt, factor)
g = torch.Generator().manual_seed(a.seed + 12345)
res = []
t0 = time.time()
for ep in range(a.epochs):
    model.train()
    perm = torch.randperm(len(ytr), generator=torch.Generator().manual_seed(a.seed * 1000 + ep))
    for b in range(steps_per):
        idx = perm[b * a.bs : (b + 1) * a.bs]
        x = xtr[idx]
        if a.pad or a.flip:
            x = augment(x, g)
        out = model(norm(x))
        loss = F.cross_entropy(out, ytr[idx], label_smoothing=a.ls)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sch.step()
        if ema is not None:
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
                    pe.lerp_(pm, 1 - a.ema)
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(yte), 1000):
            correct += (model(norm(xte[i : i + 1000])).argmax(1) == yte[i : i + 1000]).sum().item()
    acc = correct / len(yte)
    res.append(acc)
    if ema is not None:
        ema.eval()
        c2 = 0
        with torch.no_grad():
            for i in range(0, len(yte), 1000):
                c2 += (ema(norm(xte[i : i + 1000])).argmax(1) == yte[i : i + 1000]).sum().item()
        print(f"{a.tag} ep{ep + 1} ema acc {c2 / len(yte) * 100:.2f}", flush=True)
    print(
        f"{a.tag} ep{ep + 1} acc {acc * 100:.2f} loss {loss.item():.3f} t {time.time() - t0:.0f}s",
        flush=True,
    )
print(
    "RESULT",
    json.dumps({"args": vars(a), "accs": res, "final": res[-1], "s": time.time() - t0}),
    flush=True,
)
