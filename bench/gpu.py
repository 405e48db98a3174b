"""Item 7: per-preset GPU figures, for a lent CUDA machine (run it through bench/gpu.sh).

    python3 bench/gpu.py --budget-s 400 --out $OUT/gpu.json

For each run, one after the other in priority order (fashion-fp32 first: it is the fp32
reference; fashion-fp16 before the ResNets; a budget cut drops the tail), a fresh subprocess
runs the engine in-process (`tuitrain.engine.runner.run`, compile = auto, so on) and reports:
samples/s and data-wait share (the engine's train records, first interval left out), epoch time
(derived: samples per epoch / samples/s, evaluation not included), compile time (the
compile_done event), and host syncs per non-logging step: a wrapper around `Trainer.one_step`
turns `torch.cuda.set_sync_debug_mode("warn")` on for steps that neither log nor compile (after
the first interval) and counts the warnings, keeping the first few call sites. Mixed precision
is compared with fp32 of the same model (fashion-bf16/fp16 with fashion-fp32,
resnet18-synth-bf16 with the same preset at train.precision=fp32), and compiled with eager
(fashion-bf16 with fashion-bf16-eager: `compile_speedup`).

The Fashion-MNIST files are not on the GPU machine: the fashion presets run on the subset
shipped in the package (data.name=fashion_mini, 6k train / 1k val, 23 steps per epoch),
with evaluation off during training so epoch ends do not break the timing. Every run is
stopped (through its Control) right after its last measured log point, so no final evaluation
runs.

Children import this tree's tuitrain (its root goes first on PYTHONPATH), so a bare copy of
the tree with torch installed is enough. Writes the JSON after every run (a timeout keeps what
was measured) and prints it; exits 1 when no run produced a figure. Without CUDA it prints one
line and exits with code 2 (--allow-cpu runs the same plumbing on the CPU, tiny sizes, two
children at once with one torch thread each: its speeds are not figures).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import emit, engine_records, machine, note, run_json, spread, train_stats

FASHION = ["data.name=fashion_mini", "train.eval_every_epoch=false", "train.epochs=10000"]
EAGER = ['train.compile="off"']
RESNET = ["train.eval_every_epoch=false"]
# (label, preset, overrides), in priority order: a budget cut drops the tail
RUNS: list[tuple[str, str, list[str]]] = [
    ("fashion-fp32", "fashion-fp32", FASHION),
    ("fashion-bf16", "fashion-bf16", FASHION),
    ("fashion-fp16", "fashion-fp16", FASHION),
    ("fashion-bf16-eager", "fashion-bf16", [*FASHION, *EAGER]),
    ("resnet18-synth-bf16", "resnet18-synth-bf16", RESNET),
    ("resnet18-synth-fp32", "resnet18-synth-bf16", [*RESNET, 'train.precision="fp32"']),
]
SPEEDUPS = {  # mixed precision over fp32 of the same model, both compiled (compile = auto)
    "fashion-bf16": "fashion-fp32",
    "fashion-fp16": "fashion-fp32",
    "resnet18-synth-bf16": "resnet18-synth-fp32",
}
COMPILE_SPEEDUPS = {"fashion-bf16": "fashion-bf16-eager"}  # compiled over eager, same run
# On a CPU (--allow-cpu) only the plumbing is tested: tiny batches, a few steps.
CPU_STEPS = 12
CPU_FASHION = ["train.log_every=4", "data.batch_size=32"]
CPU_RESNET = ["train.log_every=4", "data.image_size=32", "data.batch_size=4"]


def count_syncs(window_from: int, counts: dict[str, Any]) -> None:
    """Wrap Trainer.one_step: sync-debug 'warn' on non-logging steps from `window_from` on."""
    import torch

    from tuitrain.engine.trainer import Trainer

    original = Trainer.one_step

    def one_step(self: Trainer, batches: Any) -> None:
        step, every, total = self.step, self.cfg.train.log_every, self.parts.total_steps
        is_log = (step + 1) % every == 0 or step + 1 == total
        first = step == self.start_step and self.parts.compiled
        if is_log or first or step < window_from or not torch.cuda.is_available():
            return original(self, batches)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                original(self, batches)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        counts["steps"] += 1
        counts["syncs"] += len(syncs)
        for w in syncs:
            site = f"{Path(w.filename).name}:{w.lineno}: {str(w.message)[:80]}"
            if site not in counts["sites"] and len(counts["sites"]) < 5:
                counts["sites"].append(site)

    Trainer.one_step = one_step  # type: ignore[method-assign]


def child(preset: str, overrides: list[str], steps: int, device: str) -> dict[str, Any]:
    import torch

    import tuitrain
    from tuitrain.core.config import load_preset

    if device == "cpu":  # the plumbing check: two children at once, one core each
        torch.set_num_threads(1)
    log_every = load_preset(preset, overrides).train.log_every
    counts: dict[str, Any] = {"steps": 0, "syncs": 0, "sites": []}
    count_syncs(window_from=log_every, counts=counts)
    # one log interval more than measured, stopped at `steps`: no final (recompiling) eval
    records = engine_records(
        preset,
        [*overrides, f"train.max_steps={steps + log_every}", f'train.device="{device}"'],
        stop_after=steps,
    )
    header = next(r for r in records if r["type"] == "header")
    compiled = [r for r in records if r.get("kind") == "compile_done"]
    stats = train_stats(records, skip=1, epoch_restarts=False)
    per_epoch = header["steps_per_epoch"] * header["global_batch"]
    cuda = torch.cuda.is_available() and device != "cpu"
    return {
        "samples_per_s": round(stats["samples_per_s"], 1),
        "data_wait_pct": round(100 * stats["data_wait_frac"], 3),
        "measured_s": round(stats["wall_s"], 2),
        "epoch_time_s": round(per_epoch / stats["samples_per_s"], 3),
        "epoch_samples": per_epoch,
        "full_fashion_epoch_time_s": (
            round(60000 / stats["samples_per_s"], 3) if preset.startswith("fashion") else None
        ),
        "compile_s": compiled[0].get("seconds") if compiled else None,
        "precision": header["precision"],
        "compile": header["compile"],
        "data": header.get("data"),
        "steps": steps,
        "log_every": log_every,
        "syncs_per_nonlog_step": counts["syncs"] / counts["steps"] if counts["steps"] else None,
        "nonlog_steps_checked": counts["steps"],
        "sync_sites": counts["sites"],
        "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "device_name": header.get("device_name"),
        "tuitrain_from": str(Path(tuitrain.__file__).parent),
    }


def device_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["gpus"] = torch.cuda.device_count()
        facts["cudnn"] = torch.backends.cudnn.version()
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) / "gpu.json" if os.environ.get("OUT") else "gpu.json"
    parser.add_argument("--out", default=str(default_out), help="where the JSON goes")
    parser.add_argument("--budget-s", type=float, default=400, help="stop starting runs after")
    parser.add_argument("--fashion-steps", type=int, default=1000)
    parser.add_argument("--resnet-steps", type=int, default=150)
    parser.add_argument("--only", nargs="*", help="labels to run (default: all, in order)")
    parser.add_argument("--no-compile", action="store_true", help="train.compile=off")
    parser.add_argument("--allow-cpu", action="store_true", help="test the plumbing on a CPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], help=argparse.SUPPRESS
    )
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.overrides, args.steps, args.device)))
        return

    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            f"gpu.py: no CUDA device here (torch {torch.__version__}); "
            "run it on a GPU machine (bench/gpu.sh)",
            file=sys.stderr,
        )
        sys.exit(2)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # every child imports this tree's tuitrain, installed or not (sys.path[0] is bench/)
    tree = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [tree, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    started = time.monotonic()
    summary: dict[str, Any] = {
        "item": "7 GPU per preset",
        "machine": machine(),
        "device": device_facts(),
        "command": " ".join(["python3 bench/gpu.py", *sys.argv[1:]]),
        "notes": "fashion presets on data.name=fashion_mini (6k/1k), eval off while training",
        "runs": {},
        "skipped": [],
    }
    results: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def measure(label: str, preset: str, overrides: list[str]) -> None:
        left = args.budget_s - (time.monotonic() - started)
        if left < 30:
            with lock:
                summary["skipped"].append(f"{label}: budget spent")
            return
        if args.no_compile:
            overrides = [*overrides, 'train.compile="off"']
        steps = args.resnet_steps if preset.startswith("resnet") else args.fashion_steps
        if device == "cpu":
            steps = min(steps, CPU_STEPS)
            overrides = [*overrides, *(CPU_RESNET if preset.startswith("resnet") else CPU_FASHION)]
        cmd = [
            sys.executable,
            __file__,
            "--child",
            preset,
            "--steps",
            str(steps),
            "--device",
            device,
        ]
        for item in overrides:
            cmd += ["--set", item]
        try:
            result = run_json(cmd, timeout=left)
            note(f"{label}: {result['samples_per_s']:.0f} samples/s")
        except Exception as exc:  # noqa: BLE001 - keep going, record what failed
            result = {"error": f"{type(exc).__name__}: {str(exc)[-600:]}"}
            note(f"{label}: failed: {exc}")
        with lock:  # the file after each run: a budget cut keeps what was measured
            results[label] = result
            summary["runs"] = {name: results[name] for name, _, _ in RUNS if name in results}
            summary["speedup_vs_fp32"] = speedups(summary["runs"], SPEEDUPS)
            summary["compile_speedup"] = speedups(summary["runs"], COMPILE_SPEEDUPS)
            summary["elapsed_s"] = round(time.monotonic() - started, 1)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(summary, indent=2, default=str) + "\n")

    todo = [run for run in RUNS if not args.only or run[0] in args.only]
    # one run at a time on a GPU (each one's speed is the figure); the CPU plumbing check
    # runs two at once, one torch thread each, as its speeds are not figures
    if device != "cpu":
        for run in todo:
            measure(*run)
    else:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(measure, *run) for run in todo]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # Ctrl-C: the queued runs must not start
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    emit(summary)
    if not any("samples_per_s" in r for r in summary["runs"].values()):
        note("no run produced a figure")
        sys.exit(1)


def speedups(runs: dict[str, dict[str, Any]], pairs: dict[str, str]) -> dict[str, Any]:
    """runs[a] / runs[b] in samples/s for each (a, b) of `pairs` that both measured."""
    out: dict[str, Any] = {}
    for mixed, fp32 in pairs.items():
        a, b = runs.get(mixed, {}), runs.get(fp32, {})
        if "samples_per_s" in a and "samples_per_s" in b:
            out[mixed] = spread([a["samples_per_s"] / b["samples_per_s"]])["median"]
    return out


if __name__ == "__main__":
    main()
