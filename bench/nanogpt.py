"""nanoGPT's own train.py against the hosted engine, on tuitrain's shipped Shakespeare (#40).

    python bench/nanogpt.py --nanogpt DIR throughput --pairs 4 --steps 200
    python bench/nanogpt.py --nanogpt DIR quality --pairs 2 --preset charlm-fast
    python bench/nanogpt.py --nanogpt DIR watched --pairs 4 --steps 200

DIR is a checkout of karpathy/nanoGPT (train.py, model.py, configurator.py). Its
data/tuitrain_char/ gets tuitrain's text encoded as the charlm task encodes it: the sorted set
of the whole text's characters as the vocabulary, the last tenth of the text for validation,
which is what nanoGPT's data/shakespeare_char/prepare.py does to its own text; written as that
script writes it (uint16 train.bin and val.bin, meta.pkl). prepare.py run on the same text
gives byte-identical files (BENCHMARKS.md, issue #40).

throughput: the same shape on both sides (4 layers, 4 heads, 128 wide, biases, context 128,
batch 32, no dropout, fp32, no compile). nanoGPT's tokens/s come from its per-iteration
times, the engine's from its train records, each the median of 20-step windows after the
first two; MFU divides the engine's FLOPs per sequence (FlopCounterMode) by the matmul
probe's peak (--measure-peak), for both sides. `--device cuda` trains both on a GPU with
TF32 matmuls (nanoGPT always allows them); nanoGPT logs every 10th iteration there, as its
shakespeare_char config does (a logged iteration reads the loss: a host-device sync), and its
rate comes from its lines' arrival times (its own `time` is the host's, not the device's).
Compile on either side with --np-arg=--compile=True and --set 'train.compile="on"'.
`bash bench/nanogpt_gpu.sh` runs the GPU comparisons on a lent machine.

quality: nanoGPT's README CPU recipe ("baby GPT": 4x4x128, context 64, batch 12, 2,000
iterations, no dropout, 20 eval batches), V = its last val loss, T = seconds from its launch
to the line that prints it; the engine's preset: seconds from its launch to the line of its
first evaluation at or below V. Both sides' lines are stamped by this script as it reads them.

watched: nanoGPT's throughput run alone against the same run under `tuitrain run` with its
dashboard attached, in a real terminal (a detached tmux session on a private socket, 160x48):
nanoGPT's own per-iteration times on both sides, read from its output (tuitrain run keeps it in
RUN_DIR/output.log). The ratio is watched / alone.

paused: the same, measured within one run instead of across a pair (process pairs here swing by
±10% with the VM's speed, more than the 2% to be seen): one `tuitrain run` over nanoGPT whose
dashboard process is stopped (SIGSTOP) and continued (SIGCONT) in alternating windows of
2.25-3.75 s, random lengths. nanoGPT runs through this script's `--stamp` wrapper, which
stamps each line with CLOCK_MONOTONIC as it arrives (nanoGPT's output is unbuffered) into a side
file; iteration k ran from stamp_k - time_k to stamp_k (its own `time`, the whole loop). Only
iterations wholly inside one window count; the ratio is the mean iteration time with the
dashboard stopped over the mean with it running, after the first 20 iterations. tuitrain run
runs under the pane's shell, not as the pane's process (tmux continues a pane process that
stops), and every stopped window is checked to be still stopped at its end (/proc state T):
`stopped_windows_verified`. A stopped
dashboard costs nothing (it takes no CPU, the tmux server has nothing to draw), so the ratio is
what the dashboard takes from the script.

--np-env KEY=VALUE sets a variable of nanoGPT's side only (under watched and paused, of the
`tuitrain run` that starts it too; e.g. glibc's
MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_, what train.host_malloc=retain sets in the
engine's process).

Pairs alternate their order; each pair prints one JSON line (progress on stderr), and a
summary is the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, machine, note, spread

DATASET = "tuitrain_char"
WINDOW, SKIP = 20, 2  # steps per throughput window; windows left out at the start
SAME_SHAPE = ["--n_layer=4", "--n_head=4", "--n_embd=128", "--dropout=0.0", "--bias=True"]
BABY = [  # nanoGPT README, "I only have a macbook": the CPU recipe, on the shipped text
    "config/train_shakespeare_char.py", f"--dataset={DATASET}", "--device=cpu",
    "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
    "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
    "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
ITER = re.compile(r"iter (\d+): loss [-\d.naif]+, time ([\d.]+)ms")
EVAL = re.compile(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)")
ENGINE_EVAL = re.compile(r"eval\s+step (\d+)")
SOCKET = f"tuitrain-nanogpt-{os.getpid()}"  # a private tmux server (watched)


def prepare(nanogpt: Path) -> dict[str, int]:
    """tuitrain's text as nanoGPT data under nanogpt/data/tuitrain_char/."""
    import numpy as np

    from tuitrain.engine.data.text import VAL_SHARE, Vocabulary, load_text

    text = load_text()
    vocab = Vocabulary(text)
    ids = vocab.encode(text).numpy()
    cut = int(len(ids) * (1 - VAL_SHARE))
    out = nanogpt / "data" / DATASET
    out.mkdir(parents=True, exist_ok=True)
    ids[:cut].astype(np.uint16).tofile(out / "train.bin")
    ids[cut:].astype(np.uint16).tofile(out / "val.bin")
    meta = {
        "vocab_size": len(vocab),
        "itos": dict(enumerate(vocab.chars)),
        "stoi": {c: i for i, c in enumerate(vocab.chars)},
    }
    with open(out / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return {"characters": len(ids), "vocab": len(vocab), "train": cut, "val": len(ids) - cut}


def stamped(
    cmd: list[str], cwd: Path, log: Path, extra_env: dict[str, str] | None = None
) -> tuple[list[tuple[float, str]], float]:
    """Run `cmd`; every output line with the seconds since launch when it was read."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    lines = [(time.perf_counter() - t0, line.rstrip("\n")) for line in proc.stdout]
    proc.wait()
    wall = time.perf_counter() - t0
    log.write_text("".join(f"{t:9.3f} {line}\n" for t, line in lines))
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}; its output: {log}")
    return lines, wall


def iter_rate(lines: list[str]) -> dict[str, float]:
    """tokens/s and ms a step from nanoGPT's `iter N: loss L, time T ms` lines."""
    step_s = {int(m.group(1)): float(m.group(2)) / 1e3 for x in lines if (m := ITER.match(x))}
    per_step = window_medians(step_s)
    return {"tokens_per_s": 32 * 128 / per_step, "step_ms": per_step * 1e3}


def log_interval(device: str) -> int:
    """nanoGPT's log interval: every iteration on a CPU (its own per-iteration `time` is the
    step); every 10th on a GPU, as its shakespeare_char config has it, since each logged
    iteration reads the loss (`loss.item()`: the host waits for the device)."""
    return 10 if device == "cuda" else 1


def stamp_rate(lines: list[tuple[float, str]]) -> dict[str, float]:
    """tokens/s from the arrival times of nanoGPT's `iter N` lines: over windows of WINDOW
    logged lines (the first SKIP left out), the median of seconds between the window's first
    and last line per iteration between them. On a GPU nanoGPT's own `time` is the host's
    launch time of one iteration, not the device's; a line's arrival follows the loss read
    that waits for the device."""
    marks = [(t, int(m.group(1))) for t, x in lines if (m := ITER.match(x)) and int(m.group(1))]
    rates = []
    for k in range(SKIP, len(marks) // WINDOW):
        (t0, i0), (t1, i1) = marks[k * WINDOW], marks[(k + 1) * WINDOW - 1]
        if t1 > t0 and i1 > i0:
            rates.append((t1 - t0) / (i1 - i0))
    if not rates:
        raise ValueError(f"fewer than {(SKIP + 1) * WINDOW} logged iterations; raise --steps")
    per_step = statistics.median(rates)
    return {"tokens_per_s": 32 * 128 / per_step, "step_ms": per_step * 1e3}


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, T: stopped, ...); "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def find_tuitrain_run(shell: int, wait_s: float = 20.0) -> int:
    """The `python -m tuitrain run` process under the pane's shell (by its argv)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        kids = subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True)
        for pid in map(int, kids.stdout.split()):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                at = argv.index(b"-m") if b"-m" in argv else -1
                if at >= 0 and argv[at + 1 : at + 3] == [b"tuitrain", b"run"]:
                    return pid
        time.sleep(0.2)
    raise RuntimeError(f"no `tuitrain run` under the pane's shell (pid {shell})")


def ended(run_dir: Path) -> bool:
    """The watched run has its end record."""
    try:
        return '"type": "end"' in (run_dir / "metrics.jsonl").read_text()
    except OSError:
        return False


def window_medians(step_s: dict[int, float]) -> float:
    """Median seconds per step over WINDOW-step windows, the first SKIP left out."""
    steps = sorted(s for s in step_s if s >= 1)
    means = [
        statistics.fmean(step_s[s] for s in steps[k * WINDOW : (k + 1) * WINDOW])
        for k in range(SKIP, len(steps) // WINDOW)
    ]
    if not means:
        raise ValueError(f"fewer than {(SKIP + 1) * WINDOW} steps timed; raise --steps")
    return statistics.median(means)


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.python = args.python or sys.executable
        self.np_env = dict(kv.split("=", 1) for kv in args.np_env)

    def nanogpt_throughput_cmd(self) -> list[str]:
        a = self.args
        return [
            self.python, "train.py", f"--dataset={DATASET}", f"--device={a.device}",
            "--compile=False", "--dtype=float32", "--block_size=128", "--batch_size=32",
            *SAME_SHAPE, f"--max_iters={a.steps}", "--eval_interval=1000000", "--eval_iters=1",
            f"--log_interval={log_interval(a.device)}", "--gradient_accumulation_steps=1",
            "--learning_rate=3e-3", "--weight_decay=0.01",
            "--warmup_iters=100", f"--lr_decay_iters={a.steps}", "--min_lr=3e-4",
            f"--out_dir={self.work / 'np-out'}", *a.np_arg,
        ]  # fmt: skip

    def nanogpt_throughput(self, i: int) -> dict[str, Any]:
        cmd = self.nanogpt_throughput_cmd()
        log = self.work / f"np-throughput-{i}.log"
        lines, wall = stamped(cmd, self.args.nanogpt, log, self.np_env)
        if self.args.device == "cuda":  # asynchronous: its own `time` is launch time only
            return {**stamp_rate(lines), "wall_s": wall}
        return {**iter_rate([x for _, x in lines]), "wall_s": wall}

    def watch_in_tmux(
        self, tmux: list[str], session: str, run_dir: Path, script: list[str]
    ) -> None:
        """`tuitrain run --run-dir RUN_DIR -- SCRIPT` with its dashboard, in a detached tmux
        session (160x48) in the nanoGPT checkout, --np-env set. tmux continues a pane's own
        process at once when it stops (server_child_stopped), so tuitrain run is the pane
        shell's child, not the pane process (`; exit` keeps the shell from exec'ing it)."""
        inner = [
            *(f"{k}={v}" for k, v in self.np_env.items()),
            self.python, "-m", "tuitrain", "run", "--run-dir", str(run_dir), "--", *script,
        ]  # fmt: skip
        command = "env " + " ".join(shlex.quote(a) for a in inner) + "; exit $?"
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "48",
             "-c", str(self.args.nanogpt), command],
            check=True,
        )  # fmt: skip

    def watched_throughput(self, i: int) -> dict[str, Any]:
        """nanoGPT under `tuitrain run` with the dashboard, in a detached tmux session."""
        run_dir = self.work / f"watched-{i}"
        shutil.rmtree(run_dir, ignore_errors=True)
        session, tmux = f"np{i}", ["tmux", "-L", f"{SOCKET}-{i}"]  # a server a run
        started = time.monotonic()
        self.watch_in_tmux(tmux, session, run_dir, self.nanogpt_throughput_cmd())
        output = run_dir / "output.log"
        # tuitrain run ends when the script does, with the dashboard left up: q once it is done
        try:
            while time.monotonic() - started < 1800:
                time.sleep(1)
                if subprocess.run([*tmux, "has-session", "-t", session]).returncode != 0:
                    break
                if ended(run_dir):
                    subprocess.run([*tmux, "send-keys", "-t", session, "q"])
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)
        wall = time.monotonic() - started
        return {**iter_rate(output.read_text(errors="replace").splitlines()), "wall_s": wall}

    def paused_windows(self, i: int) -> dict[str, Any]:
        """One watched run, its dashboard stopped and continued in alternating windows."""
        run_dir, stamps = self.work / f"paused-{i}", self.work / f"stamps-{i}.txt"
        shutil.rmtree(run_dir, ignore_errors=True)
        stamps.unlink(missing_ok=True)
        session, tmux = f"p{i}", ["tmux", "-L", f"{SOCKET}-{i}"]  # a server a run
        stamper = [
            self.python, str(Path(__file__).resolve()), "--nanogpt", str(self.args.nanogpt),
            "--stamp-to", str(stamps), "stamp", "--",
        ]  # fmt: skip
        self.watch_in_tmux(tmux, session, run_dir, [*stamper, *self.nanogpt_throughput_cmd()])
        windows: list[tuple[float, float, bool]] = []  # (start, end, dashboard running)
        stopped_verified = 0
        dashboard = None
        try:
            pane = subprocess.run(
                [*tmux, "display-message", "-p", "-t", session, "#{pane_pid}"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            dashboard = find_tuitrain_run(int(pane))
            rng = random.Random(i)
            last = f"iter {self.args.steps}:"
            running, deadline = True, time.monotonic() + 1800
            while not (stamps.exists() and last in stamps.read_text()):
                if ended(run_dir) or time.monotonic() > deadline:
                    break  # the script is gone without its last line: no more windows
                start = time.monotonic()
                os.kill(dashboard, signal.SIGCONT if running else signal.SIGSTOP)
                time.sleep(rng.uniform(2.25, 3.75))
                if not running:  # still stopped at the window's end (nothing continued it)
                    if process_state(dashboard) != "T":
                        raise RuntimeError(f"the dashboard (pid {dashboard}) did not stay stopped")
                    stopped_verified += 1
                windows.append((start, time.monotonic(), running))
                running = not running
        finally:
            if dashboard is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(dashboard, signal.SIGCONT)
                time.sleep(2)
                subprocess.run([*tmux, "send-keys", "-t", session, "q"], capture_output=True)
                time.sleep(2)
            subprocess.run([*tmux, "kill-server"], capture_output=True)
        per_state: dict[bool, list[float]] = {True: [], False: []}
        for line in stamps.read_text().splitlines():
            stamp, _, text = line.partition(" ")
            m = ITER.match(text)
            if not m or int(m.group(1)) < 20:
                continue
            end = float(stamp)
            begin = end - float(m.group(2)) / 1e3
            for w_start, w_end, state in windows:
                if w_start <= begin and end <= w_end:
                    per_state[state].append(end - begin)
        on, off = per_state[True], per_state[False]
        if not on or not off:
            raise ValueError("no iteration inside a window of each kind; raise --steps")
        return {
            "iters_running": len(on), "iters_stopped": len(off), "windows": len(windows),
            "stopped_windows_verified": stopped_verified,
            "step_ms_running": 1e3 * statistics.fmean(on),
            "step_ms_stopped": 1e3 * statistics.fmean(off),
            "ratio": statistics.fmean(off) / statistics.fmean(on),
        }  # fmt: skip

    def engine_cmd(self, preset: str, run_dir: Path, extra: list[str]) -> list[str]:
        """The engine's command: the preset on --device (TF32 matmuls on a GPU, as nanoGPT
        has them), then `extra`, then --set (the last value of a key wins)."""
        device = self.args.device
        return [
            self.python, "-m", "tuitrain", "--no-ui", "--preset", preset,
            "--run-dir", str(run_dir), "--set", f'train.device="{device}"',
            *(["--set", "train.tf32=true"] if device == "cuda" else []), *extra,
            *(x for s in self.args.set for x in ("--set", s)),
        ]  # fmt: skip

    def engine(self, i: int, preset: str, extra: list[str], tag: str) -> tuple[Any, ...]:
        run_dir = self.work / f"engine-{tag}-{i}"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = self.engine_cmd(preset, run_dir, extra)
        lines, wall = stamped(cmd, REPO, self.work / f"engine-{tag}-{i}.log")
        with open(run_dir / "metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
        return lines, wall, records

    def engine_throughput(self, i: int) -> dict[str, Any]:
        steps = ["--max-steps", str(self.args.steps), "--log-every", str(WINDOW)]
        quiet = ["--set", "train.eval_every=0", "--set", "data.val_samples=64"]
        _, wall, records = self.engine(i, "charlm-mini", [*steps, *quiet, "--measure-peak"], "tp")
        train = [r for r in records if r.get("type") == "train"][SKIP:]
        if not train:
            raise ValueError(f"fewer than {(SKIP + 1) * WINDOW} steps logged; raise --steps")

        def median(key: str) -> float | None:
            values = [r[key] for r in train if r.get(key) is not None]
            return statistics.median(values) if values else None

        header = next(r for r in records if r.get("type") == "header")
        return {
            "tokens_per_s": median("tokens_per_s"),
            "tflops": median("tflops"),
            "mfu": median("mfu"),
            "peak_tflops": header.get("peak_tflops"),
            "wall_s": wall,
        }

    def nanogpt_quality(self, i: int) -> dict[str, Any]:
        out = self.work / "np-baby"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.python, "train.py", *BABY, f"--out_dir={out}", *self.args.np_arg]
        lines, wall = stamped(cmd, self.args.nanogpt, self.work / f"np-quality-{i}.log")
        evals = [(t, int(m[1]), float(m[2])) for t, x in lines if (m := EVAL.match(x))]
        t, step, value = evals[-1]
        return {"V": value, "T_s": round(t, 2), "at_step": step, "wall_s": wall, "evals": evals}

    def engine_quality(self, i: int) -> dict[str, Any]:
        lines, wall, records = self.engine(i, self.args.preset, [], "quality")
        seen: dict[int, float] = {}
        for t, line in lines:
            m = ENGINE_EVAL.search(line)
            if m:
                seen.setdefault(int(m.group(1)), t)
        evals = [
            (seen.get(r["step"]), r["step"], r["val_loss"])
            for r in records
            if r.get("type") == "eval"
        ]
        return {"wall_s": wall, "evals": evals}


def stamp(command: list[str], to: Path) -> int:
    """Run `command`, pass its output on and write each line with its arrival time to `to`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)  # fmt: skip
    assert proc.stdout is not None
    with open(to, "w") as side:
        for line in proc.stdout:
            side.write(f"{time.monotonic():.6f} {line}")
            side.flush()
            sys.stdout.write(line)
            sys.stdout.flush()
    return proc.wait()


def load() -> float:
    return round(os.getloadavg()[0], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, required=True, help="a nanoGPT checkout")
    parser.add_argument(
        "mode", choices=["prepare", "throughput", "quality", "watched", "paused", "stamp"]
    )
    parser.add_argument("command", nargs="*", help="stamp: the command (after --)")
    parser.add_argument("--stamp-to", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="throughput: steps a run")
    parser.add_argument("--preset", default="charlm-fast", help="quality: the engine's preset")
    parser.add_argument("--set", action="append", default=[], help="engine override")
    parser.add_argument("--np-arg", action="append", default=[], help="nanoGPT argument")
    parser.add_argument(
        "--np-env", action="append", default=[], help="KEY=VALUE for nanoGPT's process"
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu",
        help="throughput: where both sides train (cuda: TF32 matmuls on both, as nanoGPT sets)",
    )  # fmt: skip
    parser.add_argument("--python", help="the interpreter of both sides (default: this one)")
    parser.add_argument("--work", type=Path, help="logs and run dirs (default: a temp dir)")
    args = parser.parse_args()
    if args.device == "cuda" and args.mode != "throughput":
        parser.error("--device cuda is for throughput only (the other modes time a CPU run)")
    least = (SKIP + 1) * WINDOW * log_interval(args.device)
    if args.mode in ("throughput", "watched") and args.steps < least:
        parser.error(f"--steps must be at least {least} on {args.device} (three timing windows)")
    if args.mode == "stamp":
        sys.exit(stamp(args.command, args.stamp_to))
    data = prepare(args.nanogpt)
    if args.mode == "prepare":
        print(json.dumps(data))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="tuitrain-nanogpt-"))
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, work)
    pairs: list[dict[str, Any]] = []
    if args.mode == "paused":
        runs = []
        for i in range(args.pairs):
            before = load()
            out = {"run": i, **bench.paused_windows(i), "load": [before, load()]}
            note(f"run {i}: ratio {out['ratio']:.4f}, load {out['load']}")
            print(json.dumps(out), flush=True)
            runs.append(out)
        print(json.dumps({
            "mode": "paused", "command": " ".join(["python bench/nanogpt.py", *sys.argv[1:]]),
            "machine": machine(), "ratio": spread([r["ratio"] for r in runs], 4),
            "load": [r["load"] for r in runs], "work": str(work),
        }), flush=True)  # fmt: skip
        return
    for i in range(args.pairs):
        before = load()
        other = "watched" if args.mode == "watched" else "engine"
        order = ("nanogpt", other) if i % 2 == 0 else (other, "nanogpt")
        pair: dict[str, Any] = {"pair": i, "order": order}
        for side in order:
            kind = "quality" if args.mode == "quality" else "throughput"
            pair[side] = getattr(bench, f"{side}_{kind}")(i)
        if args.mode == "quality":  # the target is known once nanoGPT has run: judged after
            target, evals = pair["nanogpt"]["V"], pair["engine"]["evals"]
            hit = next(((t, s, v) for t, s, v in evals if t is not None and v <= target), None)
            pair["engine"]["hit"] = hit
            pair["ratio"] = hit[0] / pair["nanogpt"]["T_s"] if hit else None
        elif args.mode == "watched":
            pair["ratio"] = pair["watched"]["tokens_per_s"] / pair["nanogpt"]["tokens_per_s"]
        else:
            engine, nanogpt = pair["engine"], pair["nanogpt"]
            pair["ratio"] = engine["tokens_per_s"] / nanogpt["tokens_per_s"]
            if engine["mfu"] is not None:  # the same FLOPs per token on both sides
                nanogpt["mfu"] = engine["mfu"] / pair["ratio"]
        pair["load"] = [before, load()]
        note(f"pair {i}: ratio {pair['ratio']}, load {pair['load']}")
        print(json.dumps(pair), flush=True)
        pairs.append(pair)
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    summary: dict[str, Any] = {
        "mode": args.mode,
        "command": " ".join(["python bench/nanogpt.py", *sys.argv[1:]]),
        "machine": machine(),
        "data": data,
        "ratio": spread(ratios),
        "load": [p["load"] for p in pairs],
        "work": str(work),
    }
    if args.mode == "watched":
        for side in ("nanogpt", "watched"):
            summary[f"{side}_tokens_per_s"] = spread([p[side]["tokens_per_s"] for p in pairs], 0)
    if args.mode == "throughput":
        for side in ("nanogpt", "engine"):
            summary[f"{side}_tokens_per_s"] = spread([p[side]["tokens_per_s"] for p in pairs], 0)
        for side in ("nanogpt", "engine"):
            summary[f"{side}_mfu"] = spread([p[side].get("mfu") or 0 for p in pairs], 4)
        summary["peak_tflops"] = spread([p["engine"]["peak_tflops"] or 0 for p in pairs], 3)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
