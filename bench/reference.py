"""Item 1: the engine against the seeds' reference loop (article 003), fp32 on the CPU.

    python bench/reference.py --steps 100 --repeats 5

Baseline (article 003's loop): torchvision FashionMNIST with ToTensor + Normalize through a
DataLoader (batch 256, shuffle, num_workers=4, pin_memory=True as in the article; also
num_workers=2, the core count here), the article's CNN (tuitrain.engine.models.vision.FashionCNN),
Adam lr 1e-3, fp32, `loss.item()` and the accuracy count every step as the article does.
Engine: `tuitrain --no-ui --preset fashion-fp32` at the article's batch of 256, with
Adam-equivalent settings (AdamW with weight_decay=0, lr 1e-3, constant schedule, no warm-up),
read from its metrics.jsonl.

Both sides skip a warm-up of --warmup steps (the engine's first log interval) and measure
the next --steps. Each measurement is a fresh subprocess; the variants run interleaved and
the order alternates every repeat. Prints a JSON summary: per-pair ratios engine/baseline
(median, min-max) and each side's data-wait share (time blocked in next(loader) / wall).

`--before-tree DIR` adds the engine of another checkout (e.g. `git archive` of an older
commit) as one more interleaved variant, `engine_before`, with the ratio engine/engine_before;
`--workers` with no value leaves the baselines out:

    python bench/reference.py --workers --before-tree /tmp/old --repeats 8

`--lightning N` adds bf16 on both sides: `engine_bf16` (`--preset fashion-bf16`, the same
Adam-equivalent settings) against `lightning_bf16`, a LightningModule over the same CNN, loss
and Adam, trained by `lightning.Trainer(precision="bf16-mixed")` on the CPU from the article's
DataLoader with N workers (`self.log` of the loss every step, as Lightning's examples do; no
progress bar, logger, checkpoint or model summary: the leanest Trainer). Lightning's side is
timed by a callback, from the end of batch `--warmup` - 1 to the end of the last:

    python bench/reference.py --workers --lightning 2 --repeats 6
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import FASHION_SYSTEM_DIR, emit, machine, note, run_json, spread, train_stats

FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def make_torchvision_root(source: Path, root: Path) -> Path:
    """root/FashionMNIST/raw/ with the decompressed IDX files.

    torchvision 0.29's FashionMNIST._check_exists only checks that the four decompressed raw
    files exist (check_integrity without an md5), and _load_data reads them directly, so the
    Debian package's recompressed .gz files (which fail the download md5) are never checked.
    """
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        target = raw / name
        if target.exists():
            continue
        packed, plain = source / f"{name}.gz", source / name
        data = gzip.decompress(packed.read_bytes()) if packed.exists() else plain.read_bytes()
        target.write_bytes(data)
    return root


def baseline(root: str, workers: int, warmup: int, steps: int, seed: int) -> dict[str, Any]:
    """The article's loop; times `steps` steps after `warmup` steps."""
    import torch
    from torch import nn, optim
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    from tuitrain.engine.models.vision import FashionCNN

    torch.manual_seed(seed)
    device = torch.device("cpu")
    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))]
    )
    dataset = datasets.FashionMNIST(root, train=True, download=False, transform=transform)
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=workers, pin_memory=True)
    model = FashionCNN().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    def endless() -> Iterator[Any]:
        while True:  # a new epoch re-creates the iterator (and the workers), as the article does
            yield from loader

    batches = endless()
    model.train()
    wait = 0.0
    t0 = time.perf_counter()
    for step in range(warmup + steps):
        if step == warmup:
            wait, t0 = 0.0, time.perf_counter()
        t = time.perf_counter()
        inputs, labels = next(batches)  # the data wait
        wait += time.perf_counter() - t
        inputs = inputs.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        _total = loss.item() * inputs.size(0)  # the article's running sums (a sync on CUDA)
        _correct = (outputs.argmax(1) == labels).sum().item()
    wall = time.perf_counter() - t0
    return {"samples_per_s": steps * 256 / wall, "data_wait_frac": wait / wall, "wall_s": wall}


def lightning(root: str, workers: int, warmup: int, steps: int, seed: int) -> dict[str, Any]:
    """Lightning's Trainer with bf16-mixed on the same CNN; times `steps` steps after `warmup`."""
    import lightning as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    from tuitrain.engine.models.vision import FashionCNN

    L.seed_everything(seed, verbose=False)
    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))]
    )
    dataset = datasets.FashionMNIST(root, train=True, download=False, transform=transform)
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=workers)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = FashionCNN()
            self.criterion = nn.CrossEntropyLoss()

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            inputs, labels = batch
            loss = self.criterion(self.model(inputs), labels)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    marks: dict[int, float] = {}

    class Clock(L.Callback):
        def on_train_batch_end(self, *_: Any) -> None:
            marks[len(marks)] = time.perf_counter()

    trainer = L.Trainer(
        accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=warmup + steps,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[Clock()],
    )  # fmt: skip
    trainer.fit(Module(), loader)
    wall = marks[warmup + steps - 1] - marks[warmup - 1]
    return {"samples_per_s": steps * 256 / wall, "wall_s": wall}  # its data wait: not timed


ENGINE_OVERRIDES = [
    "data.batch_size=256",  # the article's (the presets train at 64 for accuracy, issue #18)
    "optim.lr=1e-3",
    "optim.weight_decay=0",  # AdamW with no decay is Adam
    'optim.schedule="constant"',
    "optim.warmup_steps=0",
    'train.device="cpu"',
]


def engine(
    warmup: int, steps: int, seed: int, data_dir: str, tree: str = "", preset: str = "fashion-fp32"
) -> dict[str, Any]:
    """`tuitrain --no-ui --preset PRESET` in a subprocess; figures from metrics.jsonl.

    `tree`: run the tuitrain of that checkout instead of the installed one."""
    import os
    import subprocess

    with tempfile.TemporaryDirectory(prefix="tuitrain-bench-") as tmp:
        cmd = [sys.executable, "-m", "tuitrain", "--no-ui", "--preset", preset]
        for item in [*ENGINE_OVERRIDES, f"train.log_every={warmup}"]:
            cmd += ["--set", item]
        cmd += ["--max-steps", str(warmup + steps), "--seed", str(seed), "--run-dir", tmp]
        if data_dir:
            cmd += ["--data-dir", data_dir]
        env = dict(os.environ, PYTHONPATH=tree) if tree else None
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=tree or None, env=env)
        lines = (Path(tmp) / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    return train_stats(records, skip=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=50, help="steps before the window")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="*", default=[4, 2])
    parser.add_argument("--before-tree", default="", help="also run this checkout's engine")
    parser.add_argument("--data-dir", default=str(FASHION_SYSTEM_DIR))
    parser.add_argument(
        "--lightning", type=int, metavar="N", help="also bf16: engine against Lightning, N workers"
    )
    parser.add_argument("--preset", default="fashion-fp32", help=argparse.SUPPRESS)
    parser.add_argument(
        "--child", choices=["baseline", "engine", "lightning"], help=argparse.SUPPRESS
    )
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--tree", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1 (--warmup is the log interval)")
    if args.steps % args.warmup:
        parser.error("--steps must be a multiple of --warmup (the engine's log interval)")
    if args.child == "baseline":
        print(json.dumps(baseline(args.root, args.workers[0], args.warmup, args.steps, args.seed)))
        return
    if args.child == "lightning":
        out = lightning(args.root, args.workers[0], args.warmup, args.steps, args.seed)
        print(json.dumps(out))
        return
    if args.child == "engine":
        out = engine(args.warmup, args.steps, args.seed, args.data_dir, args.tree, args.preset)
        print(json.dumps(out))
        return

    me = [sys.executable, __file__, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    with tempfile.TemporaryDirectory(prefix="fashion-tv-") as tmp:
        root = make_torchvision_root(Path(args.data_dir), Path(tmp))
        variants = {
            f"baseline_nw{w}": ["--child", "baseline", "--workers", str(w)] for w in args.workers
        }
        variants["engine"] = ["--child", "engine", "--data-dir", args.data_dir]
        if args.before_tree:
            before = str(Path(args.before_tree).resolve())
            variants["engine_before"] = [*variants["engine"], "--tree", before]
        if args.lightning is not None:
            variants["engine_bf16"] = [*variants["engine"], "--preset", "fashion-bf16"]
            variants["lightning_bf16"] = ["--child", "lightning", "--workers", str(args.lightning)]
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        for r in range(args.repeats):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                out = run_json([*me, *variants[name], "--root", str(root), "--seed", str(r)])
                results[name].append(out)
                wait = out.get("data_wait_frac")
                note(
                    f"repeat {r} {name}: {out['samples_per_s']:.0f} samples/s"
                    + (f", data wait {100 * wait:.1f}%" if wait is not None else "")
                )

    summary: dict[str, Any] = {
        "item": "1 engine vs reference loop (fp32, CPU)",
        "machine": machine(),
        "command": " ".join(["python bench/reference.py", *sys.argv[1:]]),
        "steps": args.steps,
        "warmup": args.warmup,
        "goal": "ratio >= 1.15 and engine data wait < 2%",
    }
    for name, runs in results.items():
        summary[name] = {"samples_per_s": spread([o["samples_per_s"] for o in runs], 1)}
        if all("data_wait_frac" in o for o in runs):
            summary[name]["data_wait_pct"] = spread([100 * o["data_wait_frac"] for o in runs], 2)
    for w in args.workers:
        ratios = [
            e["samples_per_s"] / b["samples_per_s"]
            for e, b in zip(results["engine"], results[f"baseline_nw{w}"], strict=True)
        ]
        summary[f"ratio_engine_over_baseline_nw{w}"] = spread(ratios)
    if args.lightning is not None:
        ratios = [
            e["samples_per_s"] / b["samples_per_s"]
            for e, b in zip(results["engine_bf16"], results["lightning_bf16"], strict=True)
        ]
        summary["ratio_engine_bf16_over_lightning_bf16"] = spread(ratios)
    if args.before_tree:
        summary["before_tree"] = str(Path(args.before_tree).resolve())
        ratios = [
            e["samples_per_s"] / b["samples_per_s"]
            for e, b in zip(results["engine"], results["engine_before"], strict=True)
        ]
        summary["ratio_engine_over_engine_before"] = spread(ratios)
        waits = [
            100 * (e["data_wait_frac"] - b["data_wait_frac"])
            for e, b in zip(results["engine"], results["engine_before"], strict=True)
        ]
        summary["data_wait_pct_points_engine_minus_before"] = spread(waits, 2)
    emit(summary)


if __name__ == "__main__":
    main()
