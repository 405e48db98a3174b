"""Issue #8: how long `tuitrain watch` takes to open a one-million-record metrics.jsonl.

    python bench/watch_open.py --records 1000000 --repeats 5

Generates the file once (written with the engine's own `to_json_line`, the shape of a real
CPU run: a header, `train` records every 10 steps with every contract field, CUDA/NVML and
scaler fields null, and every 100 train records an `eval` and a checkpoint `event`; an `end`
record last), then, per repeat and each in a fresh process:

(a) follower: `JsonlFollower(path, MetricStore()).poll()`, the first poll, which ingests the
    whole file (what `tuitrain watch` does before the app starts), then one `snapshot()`;
    time, RSS growth over the RSS before the poll, and the peak RSS growth (VmHWM).
(b) first frame: `python -m tuitrain watch FILE` in a detached tmux session (--cols x
    --rows, a private tmux server), the pane polled with `tmux capture-pane` every 20 ms;
    the time from launching the session until the pane shows the file's last step in the
    status bar and the loss chart's braille marks. It includes Python's start and the
    imports, so the same is measured on a small file (same header, 200 records) as a
    baseline; the RSS of the watch process at that moment (VmRSS, VmHWM), against the same
    baseline, is (c) the RSS the file costs.

Large and small runs alternate (big, small, big...). Prints one JSON summary: median and
min-max spread of each figure. With --dir the files are kept there and reused by the next
run. `--tree DIR` measures another checkout's tuitrain on the same file, e.g. the follower
before issue #8: `git archive 0c77b36 tuitrain | tar -x -C DIR`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, emit, machine, note, rss_bytes, spread

MB = 1 << 20
LOG_EVERY = 10
EVAL_EVERY = 100  # train records between evals (an eval every 1,000 steps)
SOCKET = f"tuitrain-watch-bench-{os.getpid()}"  # a private tmux server
TREE = REPO  # whose tuitrain is measured (--tree: another checkout, e.g. an older commit)
BRAILLE = range(0x2801, 0x2900)  # plotext's line marks (U+2800 is the blank pattern)


# ------------------------------------------------------------------------------ the file
def header(total_steps: int, run_dir: str) -> dict[str, Any]:
    """The header of a real `tuitrain --no-ui --epochs 1` CPU run (fashion-mini, bf16)."""
    return {
        "type": "header",
        "preset": "fashion-mini",
        "config": {
            "preset": {"description": "Fashion-MNIST subset shipped in the package (6k/1k)"},
            "model": {"name": "fashion_cnn", "dropout": 0.5, "channels_last": False},
            "data": {
                "name": "fashion_mini", "loader": "device", "batch_size": 256,
                "eval_batch_size": 1024, "num_classes": 10, "num_workers": 2,
                "pin_memory": True, "persistent_workers": True, "prefetch_factor": 2,
                "data_dir": "", "image_size": 224, "channels": 3, "train_samples": 0,
                "val_samples": 0,
            },
            "optim": {
                "name": "adamw", "lr": 0.003, "weight_decay": 0.0001, "momentum": 0.9,
                "schedule": "cosine", "warmup_steps": 10, "min_lr_ratio": 0.0,
                "grad_clip": 0.0, "grad_accum": 1,
            },
            "train": {
                "epochs": 1, "max_steps": total_steps, "device": "auto", "precision": "auto",
                "compile": "auto", "compile_mode": "default", "tf32": True, "seed": 0,
                "log_every": LOG_EVERY, "profile_steps": 0, "eval_every_epoch": True,
                "pace_s": 0.0,
            },
            "run": {"run_dir": run_dir},
            "checkpoint": {"every_steps": 0, "at_epoch_end": True, "on_stop": True, "keep": 3},
            "distributed": {"timeout_s": 300.0},
        },
        "device": "cpu", "device_name": "CPU (AVX512, 2 threads)", "precision": "bf16",
        "compile": False, "world_size": 1, "torch": "2.14.1+cu130", "tuitrain": "0.1.0",
        "python": "3.11.7", "time": "2026-11-30T02:41:44+00:00",
        "data": "Fashion-MNIST mini subset shipped with tuitrain (6,000 train / 1,000 val)",
        "train_samples": 5888, "val_samples": 1000, "params": 824458, "global_batch": 256,
        "steps_per_epoch": 23, "total_steps": total_steps, "run_dir": run_dir,
        "device_memory_bytes": None,
    }  # fmt: skip


def train(step: int, total_steps: int) -> dict[str, Any]:
    """A train record as the engine writes it on CPU (same fields, order and nulls)."""
    s = float(step)
    wait = 0.003 + 0.001 * math.sin(s / 70.0)
    rate = 3600.0 + 150.0 * math.sin(s / 130.0) + 40.0 * math.sin(s / 7.0)
    return {
        "type": "train",
        "step": step,
        "epoch": round(step / 23, 4),
        "samples": step * 256,
        "loss": 0.25 + 2.0 * math.exp(-s / 20_000.0) + 0.05 * math.sin(s / 9.0),
        "lr": 0.003 * 0.5 * (1 + math.cos(math.pi * step / total_steps)),
        "samples_per_s": rate,
        "step_time_s": 256.0 / rate,
        "data_wait_s": wait * LOG_EVERY * 256.0 / rate,
        "data_wait_frac": wait,
        "mem_alloc_bytes": None,
        "mem_reserved_bytes": None,
        "mem_peak_bytes": None,
        "host_rss_bytes": 784_596_992 + (step % 4096) * 4096,
        "gpu_util_pct": None,
        "gpu_mem_used_bytes": None,
        "grad_scale": None,
        "skipped_steps": None,
        "grad_norm": 1.2 + 3.8 * math.exp(-s / 5_000.0),
    }


def generate(path: Path, n_records: int) -> dict[str, Any]:
    """Write a run of about `n_records` records; returns its counts and last step."""
    from tuitrain.metrics.sinks import to_json_line

    n_train = max(1, round(n_records / (1 + 2 / EVAL_EVERY)) - 2)  # header, end
    total_steps = n_train * LOG_EVERY
    counts = {"header": 1, "train": 0, "eval": 0, "event": 0, "end": 1}
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_json_line(header(total_steps, str(path.parent))) + "\n")
        lines: list[str] = []
        for i in range(1, n_train + 1):
            step = i * LOG_EVERY
            lines.append(to_json_line(train(step, total_steps)))
            counts["train"] += 1
            if i % EVAL_EVERY == 0:
                acc = 0.9 - 0.2 * math.exp(-step / 50_000.0)
                evaluation = {"type": "eval", "step": step, "epoch": round(step / 23, 4),
                              "val_loss": 1.0 - acc, "val_acc": acc}  # fmt: skip
                ckpt = str(path.parent / "checkpoints" / f"ckpt-step{step:08d}.pt")
                event = {"type": "event", "level": "info", "kind": "checkpoint",
                         "message": f"checkpoint saved at step {step}: {ckpt}",
                         "path": ckpt, "step": step}  # fmt: skip
                lines += [to_json_line(evaluation), to_json_line(event)]
                counts["eval"] += 1
                counts["event"] += 1
            if len(lines) >= 50_000:
                f.write("\n".join(lines) + "\n")
                lines = []
        end = {"type": "end", "status": "completed", "reason": "reached the configured steps",
               "step": total_steps, "samples": total_steps * 256, "elapsed_s": 712_345.6,
               "mean_samples_per_s": 3600.0, "val_acc": 0.9, "val_loss": 0.1}  # fmt: skip
        lines.append(to_json_line(end))
        f.write("\n".join(lines) + "\n")
    return {"records": sum(counts.values()), "counts": counts, "last_step": total_steps}


def generate_once(path: Path, n_records: int) -> dict[str, Any]:
    """`generate`, or the file a previous run left in --dir (its facts in facts.json)."""
    facts_path = path.with_name("facts.json")
    if path.exists() and facts_path.exists():
        facts = json.loads(facts_path.read_text())
        if facts.get("asked") == n_records and facts.get("bytes") == path.stat().st_size:
            note(f"reusing {path} ({facts['records']:,} records)")
            return facts
    note(f"writing {n_records:,} records to {path}…")
    t0 = time.perf_counter()
    facts = generate(path, n_records)
    facts.update(asked=n_records, bytes=path.stat().st_size)
    facts_path.write_text(json.dumps(facts))
    note(f"written in {time.perf_counter() - t0:.1f} s, {path.stat().st_size / MB:.0f} MB")
    return facts


# ------------------------------------------------------------------------------ (a) follower
def vm_kb(pid: int | str, field: str) -> int:
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child_follow(path: Path) -> None:
    """In a fresh process: the first poll of the whole file, then a snapshot."""
    import gc

    from tuitrain.metrics.store import MetricStore
    from tuitrain.rundir.follow import JsonlFollower

    gc.collect()
    rss0, hwm0 = rss_bytes(), vm_kb("self", "VmHWM") * 1024
    store = MetricStore()
    t0 = time.perf_counter()
    pushed = JsonlFollower(path, store).poll()
    t_poll = time.perf_counter() - t0
    snap = store.snapshot()
    t_snap = time.perf_counter() - t0
    gc.collect()
    out = {
        "poll_s": t_poll,
        "poll_and_snapshot_s": t_snap,
        "pushed": pushed,
        "last_step": (snap.latest or {}).get("step"),
        "loss_points": len(snap.get("loss")),
        "evals": len(snap.evals),
        "rss_growth_mb": (rss_bytes() - rss0) / MB,
        "peak_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - hwm0) / MB,
    }
    print(json.dumps(out))


def measure_follow(path: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-follow", str(path)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TREE), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=TREE, env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ (b) first frame
def tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True)


def measure_frame(path: Path, last_step: int, cols: int, rows: int, timeout: float) -> dict:
    """Launch `tuitrain watch path` in tmux; time until the pane shows the last step."""
    session = f"w{time.monotonic_ns()}"
    cmd = f"'{sys.executable}' -m tuitrain watch '{path}'"
    launched = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), "-c", str(TREE),
         "-e", f"PYTHONPATH={TREE}", cmd)  # fmt: skip
    pid = tmux("display-message", "-p", "-t", session, "#{pane_pid}").stdout.strip()
    wanted = f"step {last_step}/"
    seen = None
    rss_kb = hwm_kb = 0
    screen = ""
    while time.monotonic() - launched < timeout:
        screen = tmux("capture-pane", "-p", "-t", session).stdout
        if wanted in screen and any(ord(c) in BRAILLE for c in screen):
            seen = time.monotonic() - launched
            rss_kb, hwm_kb = vm_kb(pid, "VmRSS"), vm_kb(pid, "VmHWM")
            break
        time.sleep(0.02)
    tmux("send-keys", "-t", session, "q")
    deadline = time.monotonic() + 10
    while tmux("has-session", "-t", session).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    tmux("kill-session", "-t", session)
    if seen is None:
        raise RuntimeError(f"no frame with {wanted!r} after {timeout} s; the pane:\n{screen}")
    return {"first_frame_s": seen, "rss_mb": rss_kb / 1024, "peak_rss_mb": hwm_kb / 1024}


# ------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cols", type=int, default=120)
    parser.add_argument("--rows", type=int, default=36)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--dir", help="where the files go, kept and reused by the next run (default: a temp dir)"
    )
    parser.add_argument(
        "--tree", help="measure the tuitrain of this checkout instead (git archive of a commit)"
    )
    parser.add_argument("--child-follow", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global TREE
    TREE = Path(args.tree).resolve() if args.tree else REPO
    if args.child_follow:
        child_follow(Path(args.child_follow))
        return

    with tempfile.TemporaryDirectory(prefix="watch-open-") as tmp:
        where = Path(args.dir or tmp)
        where.mkdir(parents=True, exist_ok=True)
        big, small = where / "big" / "metrics.jsonl", where / "small" / "metrics.jsonl"
        big.parent.mkdir(exist_ok=True)
        small.parent.mkdir(exist_ok=True)
        facts = generate_once(big, args.records)
        small_facts = generate_once(small, 200)
        follow: list[dict] = []
        frames: list[dict] = []
        base: list[dict] = []
        try:
            for r in range(args.repeats):
                follow.append(measure_follow(big))
                frames.append(measure_frame(big, facts["last_step"], args.cols, args.rows,
                                            args.timeout))  # fmt: skip
                base.append(measure_frame(small, small_facts["last_step"], args.cols,
                                          args.rows, args.timeout))  # fmt: skip
                note(f"repeat {r + 1}: poll {follow[-1]['poll_s']:.2f} s, first frame "
                     f"{frames[-1]['first_frame_s']:.2f} s (small file "
                     f"{base[-1]['first_frame_s']:.2f} s)")  # fmt: skip
        finally:
            tmux("kill-server")
        size_mb = big.stat().st_size / MB

    def col(rows: list[dict], key: str) -> list[float]:
        return [row[key] for row in rows]

    frame_s = col(frames, "first_frame_s")
    emit(
        {
            "item": "issue #8: tuitrain watch opening a 1M-record metrics.jsonl",
            "machine": machine(),
            "command": " ".join(["python bench/watch_open.py", *sys.argv[1:]]),
            "tree": str(TREE),
            "file": {**facts, "size_mb": round(size_mb, 1)},
            "terminal": f"tmux {args.cols}x{args.rows}",
            "a_first_poll_s": spread(col(follow, "poll_s")),
            "a_poll_and_snapshot_s": spread(col(follow, "poll_and_snapshot_s")),
            "a_rss_growth_mb": spread(col(follow, "rss_growth_mb"), 1),
            "a_peak_rss_growth_mb": spread(col(follow, "peak_growth_mb"), 1),
            "a_store": {k: follow[-1][k] for k in ("pushed", "last_step", "loss_points", "evals")},
            "b_first_frame_s": spread(frame_s),
            "b_first_frame_small_file_s": spread(col(base, "first_frame_s")),
            "c_watch_rss_mb": spread(col(frames, "rss_mb"), 1),
            "c_watch_rss_small_file_mb": spread(col(base, "rss_mb"), 1),
            "c_watch_peak_rss_mb": spread(col(frames, "peak_rss_mb"), 1),
            "c_watch_peak_rss_small_file_mb": spread(col(base, "peak_rss_mb"), 1),
            "goal": "first frame < 3 s, bounded memory",
            "met_first_frame": max(frame_s) < 3.0,
        }
    )


if __name__ == "__main__":
    main()
