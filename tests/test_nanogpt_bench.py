"""bench/nanogpt.py's plumbing on a stand-in for nanoGPT: a train.py that reads the data the
bench prepared (as nanoGPT's get_batch does) and prints nanoGPT's own line formats, against a
tiny real engine run. The figures are not checked (no timing in tests), only that both sides
are read, paired and summarised, and that the prepared data is tuitrain's text."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.engine.data.text import load_text

ROOT = Path(__file__).resolve().parents[1]

# nanoGPT's configurator takes --key=value; the stand-in reads max_iters and the dataset,
# checks the data is the text's (meta.pkl decodes train.bin + val.bin), and prints what
# nanoGPT prints: "iter N: loss L, time Tms, mfu M%" and "step N: train loss A, val loss B".
STAND_IN = """
import hashlib, pickle, sys
import numpy as np
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
steps, data = int(args["max_iters"]), "data/" + args["dataset"]
meta = pickle.load(open(data + "/meta.pkl", "rb"))
ids = np.concatenate([np.fromfile(data + f"/{s}.bin", dtype=np.uint16) for s in ("train", "val")])
text = "".join(meta["itos"][int(i)] for i in ids)
print("text", len(text), hashlib.sha256(text.encode()).hexdigest())
for it in range(steps + 1):
    if it % 5 == 0:
        print(f"step {it}: train loss 4.0000, val loss {4.0 / (1 + it / 100):.4f}")
    print(f"iter {it}: loss 3.9000, time {10.0 + it % 3:.2f}ms, mfu -100.00%")
"""

TINY = [
    "model.layers=1", "model.width=32", "model.heads=2", "data.context=32",
    "data.batch_size=8", "data.val_samples=16",
]  # fmt: skip


def bench(tmp_path: Path, *args: str) -> list[dict]:
    nanogpt = tmp_path / "nanogpt"
    (nanogpt / "config").mkdir(parents=True, exist_ok=True)
    (nanogpt / "train.py").write_text(STAND_IN)
    (nanogpt / "config" / "train_shakespeare_char.py").write_text("")
    sets = [x for s in TINY for x in ("--set", s)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "nanogpt.py"), "--nanogpt", str(nanogpt),
         *args, *sets, "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.slow
def test_throughput_pairs_both_sides(tmp_path: Path) -> None:
    *pairs, summary = bench(tmp_path, "throughput", "--pairs", "2", "--steps", "60")
    assert [p["order"] for p in pairs] == [["nanogpt", "engine"], ["engine", "nanogpt"]]
    for pair in pairs:
        # the stand-in's 10-12 ms a step, windows after the first two: 4,096 tokens a step
        assert 4096 / 0.0125 < pair["nanogpt"]["tokens_per_s"] < 4096 / 0.0095
        assert pair["engine"]["tokens_per_s"] > 0 and pair["engine"]["peak_tflops"] > 0
        assert pair["engine"]["mfu"] > 0 and pair["nanogpt"]["mfu"] > 0
        assert pair["ratio"] == pair["engine"]["tokens_per_s"] / pair["nanogpt"]["tokens_per_s"]
    assert summary["ratio"]["n"] == 2 and summary["data"]["vocab"] == 67
    log = (tmp_path / "work" / "np-throughput-0.log").read_text()
    digest = hashlib.sha256(load_text().encode()).hexdigest()
    assert f"text {summary['data']['characters']} {digest}" in log  # the text itself, decoded


@pytest.mark.slow
def test_quality_finds_the_engine_eval_at_or_below_nanogpts_last(tmp_path: Path) -> None:
    # the stand-in's last val loss: 4 / 21 = 0.1905 (far below anything real): no hit
    *pairs, summary = bench(
        tmp_path, "quality", "--pairs", "1", "--preset", "charlm-mini",
        "--set", "train.max_steps=20", "--set", "train.eval_every=10",
    )  # fmt: skip
    [pair] = pairs
    assert pair["nanogpt"]["V"] == 0.1905 and pair["nanogpt"]["at_step"] == 2000
    assert 0 < pair["nanogpt"]["T_s"] <= pair["nanogpt"]["wall_s"]
    evals = pair["engine"]["evals"]
    assert [step for _, step, _ in evals] == [10, 20]
    assert all(0 < t <= pair["engine"]["wall_s"] for t, _, _ in evals)
    assert pair["engine"]["hit"] is None and pair["ratio"] is None
    assert summary["ratio"]["n"] == 0


# For `paused`: a stand-in that takes the time it prints (50 ms an iteration), long enough for
# a few of the bench's 2.25-3.75 s windows
PACED = """
import sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
for it in range(int(args["max_iters"]) + 1):
    t0 = time.perf_counter()
    time.sleep(0.05)
    print(f"iter {it}: loss 3.9000, time {1e3 * (time.perf_counter() - t0):.2f}ms, mfu -100.00%")
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="the bench runs the dashboard in tmux")
def test_paused_reads_iterations_inside_dashboard_on_and_off_windows(tmp_path: Path) -> None:
    nanogpt = tmp_path / "nanogpt"
    nanogpt.mkdir()
    (nanogpt / "train.py").write_text(PACED)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "nanogpt.py"), "--nanogpt", str(nanogpt),
         "paused", "--pairs", "1", "--steps", "160", "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run, summary = (json.loads(line) for line in proc.stdout.splitlines())
    assert run["windows"] >= 2
    # every stopped window was still stopped at its end: the dashboard did not run in it
    assert run["stopped_windows_verified"] == run["windows"] // 2 >= 1
    # iterations wholly inside a window, after the first 20: some of each kind, none twice
    assert run["iters_running"] > 0 and run["iters_stopped"] > 0
    assert run["iters_running"] + run["iters_stopped"] <= 160 - 20 + 1
    assert run["ratio"] == pytest.approx(run["step_ms_stopped"] / run["step_ms_running"])
    assert summary["mode"] == "paused" and summary["ratio"]["n"] == 1
    # the dashboard saw the script's lines: tuitrain run kept them in output.log
    output = (tmp_path / "work" / "paused-0" / "output.log").read_text()
    assert "iter 160:" in output


def bench_module():  # type: ignore[no-untyped-def]
    """bench/nanogpt.py as a module (it imports bench/_common.py as a top-level module)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(
            "nanogpt_bench", ROOT / "bench" / "nanogpt.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


def test_gpu_rate_comes_from_line_arrivals_not_nanogpts_own_time() -> None:
    nb = bench_module()
    # a logged line every 10 iterations, arriving 50 ms apart (5 ms an iteration), while
    # nanoGPT's own `time` (the host's launch time on a GPU) says 1 ms; one slow window
    lines = [(0.0, "step 0: train loss 4.2, val loss 4.2")]
    t = 0.0
    for it in range(10, 1010, 10):
        t += 0.5 if it == 500 else 0.05
        lines.append((t, f"iter {it}: loss 3.9000, time 1.00ms, mfu 1.00%"))
    rate = nb.stamp_rate(lines)
    assert rate["step_ms"] == pytest.approx(5.0)  # the median window, not the slow one
    assert rate["tokens_per_s"] == pytest.approx(32 * 128 / 0.005)
    with pytest.raises(ValueError, match="raise --steps"):
        nb.stamp_rate(lines[:41])  # two windows of 20 logged lines, both left out


def test_gpu_commands_train_both_sides_on_cuda_with_overrides_last(tmp_path: Path) -> None:
    nb = bench_module()
    args = argparse.Namespace(
        device="cuda", steps=2000, np_arg=["--compile=True"], np_env=[], python="py",
        set=['train.compile_mode="reduce-overhead"'],
    )  # fmt: skip
    b = nb.Bench(args, tmp_path)
    np_cmd = b.nanogpt_throughput_cmd()
    assert "--device=cuda" in np_cmd and "--log_interval=10" in np_cmd
    assert np_cmd.index("--compile=False") < np_cmd.index("--compile=True")  # the last wins
    engine = b.engine_cmd("charlm-mini", tmp_path / "run", ["--measure-peak"])
    sets = [engine[i + 1] for i, a in enumerate(engine) if a == "--set"]
    assert sets[:2] == ['train.device="cuda"', "train.tf32=true"]
    assert sets[-1] == 'train.compile_mode="reduce-overhead"'
    args.device = "cpu"  # the CPU figures' commands stay as they were
    assert "--log_interval=1" in b.nanogpt_throughput_cmd()
    engine = b.engine_cmd("charlm-mini", tmp_path / "run", [])
    assert 'train.device="cpu"' in engine and "train.tf32=true" not in engine


@pytest.mark.slow
def test_gpu_script_says_what_is_missing_in_one_line(tmp_path: Path) -> None:
    script = str(ROOT / "bench" / "nanogpt_gpu.sh")
    stand_in = tmp_path / "nanogpt"
    stand_in.mkdir()
    for name in ("train.py", "model.py"):
        (stand_in / name).write_text("")
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out")}
    cases = [
        (["abc"], {}, "budget_s must be a whole number of seconds, not 'abc'"),
        (["600"], {"NANOGPT": str(tmp_path / "none")}, "no nanoGPT checkout at"),
        (["60"], {"NANOGPT": str(stand_in)}, "too short for three pairs; give at least 180"),
    ]
    import torch

    if not torch.cuda.is_available():  # on a GPU machine this case would start measuring
        cases.append((["600"], {"NANOGPT": str(stand_in)}, "no CUDA device here"))
    for args, extra, said in cases:
        proc = subprocess.run(
            ["bash", script, *args], capture_output=True, text=True, env={**env, **extra},
            timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_gpu_timing_is_refused_where_it_would_measure_wrong(tmp_path: Path) -> None:
    for args, said in (
        (["quality", "--device", "cuda"], "--device cuda is for throughput only"),
        (["throughput", "--device", "cuda", "--steps", "200"], "--steps must be at least 600"),
        (["throughput", "--steps", "40"], "--steps must be at least 60 on cpu"),
    ):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "nanogpt.py"), "--nanogpt", str(tmp_path), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()  # refused before preparing anything
