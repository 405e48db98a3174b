"""`tuitrain [flags]`: train a preset with the dashboard, headless (`--no-ui`), as a torchrun
rank, or as `--nproc N` ranks; `--list-presets`. Imports torch and Textual lazily so `--help`
and `--list-presets` stay instant."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from tuitrain import __version__
from tuitrain.commands import COMMANDS
from tuitrain.core.config import (
    DEFAULT_PRESET,
    Config,
    describe_presets,
    load_preset,
    overrides_from,
)
from tuitrain.core.errors import OneLineParser, UserError, usable_path
from tuitrain.core.text import strip_controls
from tuitrain.host.launch import resume_config, run_headless
from tuitrain.host.signals import defer_signals, early_signal, undefer_signals
from tuitrain.host.stdio import print_out
from tuitrain.rundir.layout import resumed_run_dir
from tuitrain.rundir.lock import refuse_if_held

ENVIRONMENT_HELP = """environment:
  TUITRAIN_DATA        folder with Fashion-MNIST's IDX files (after --data-dir)
  TUITRAIN_NO_DOWNLOAD 1: never download Fashion-MNIST (offline machines, CI)
  XDG_CONFIG_HOME      user presets in $XDG_CONFIG_HOME/tuitrain/presets (~/.config)
  XDG_CACHE_HOME       downloaded data in $XDG_CACHE_HOME/tuitrain (~/.cache)
  TERM                 dumb (or a terminal the UI cannot drive): line logs, as --no-ui
  CUDA_VISIBLE_DEVICES the GPUs torch sees; --nproc needs one per rank
  WORLD_SIZE, RANK, LOCAL_RANK  set by torchrun: this process is one rank of a DDP job

"""

EXIT_CODES_HELP = (
    ENVIRONMENT_HELP
    + """exit codes:
  0    completed            1    training failed (NaN loss, out of memory, a bug)
  2    usage, preset, data or checkpoint error
  3    tuitrain parity: FAIL (mixed precision lost more than 0.5 point)
  4    stopped from the UI (q in the dashboard, or stop from tuitrain watch);
       its last checkpoint resumes it: tuitrain --resume auto --run-dir DIR
  129  stopped by SIGHUP (the terminal went away)
  130  stopped by SIGINT (Ctrl-C)    143  stopped by SIGTERM
"""
)


def build_parser() -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    listed = "\n".join(
        f"  tuitrain {verb:<{width}}  {line} (tuitrain {verb} --help)"
        for verb, (_, line) in COMMANDS.items()
    )
    p = OneLineParser(
        prog="tuitrain",
        description="A terminal training monitor that hosts a real PyTorch run.\n"
        f"Other commands:\n{listed}",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"tuitrain {__version__}")
    p.add_argument(
        "--preset", help=f"preset name or path to a .toml file (default {DEFAULT_PRESET})"
    )
    p.add_argument(
        "--resume",
        metavar="PATH|auto",
        help="continue a run from a checkpoint; auto = newest complete one of --run-dir",
    )
    p.add_argument("--list-presets", action="store_true", help="list presets and exit")
    p.add_argument("--no-ui", action="store_true", help="headless: line logs on stdout")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any preset field (repeatable)",
    )
    p.add_argument("--max-steps", type=int, help="stop after N optimizer steps in total")
    p.add_argument("--epochs", type=int, help="epochs to train")
    p.add_argument("--run-dir", help="run directory (default runs/<preset>-<timestamp>)")
    p.add_argument("--data-dir", help="folder with Fashion-MNIST's IDX files")
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda", "mps"],
        help="where to train (default auto: cuda, then mps, then cpu)",
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "bf16"],
        help="auto = bf16 where native (Ampere+ GPUs, CPUs with AVX512-BF16/AMX), else fp16 "
        "with a GradScaler on CUDA, else fp32",
    )
    p.add_argument(
        "--compile",
        dest="compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model (default: on for CUDA)",
    )
    p.add_argument(
        "--measure-peak",
        action="store_true",
        default=None,
        help="measure the peak TFLOP/s for MFU with a 0.5 s matmul probe on the run's device "
        "and dtype (default: NVIDIA's datasheet figure; none on CPU)",
    )
    p.add_argument("--log-every", type=int, help="optimizer steps between log points")
    p.add_argument("--seed", type=int, help="seed for weights, batch order and dropout")
    p.add_argument("--profile-steps", type=int, help="profile N steps with torch.profiler")
    p.add_argument(
        "--memory-snapshot-steps",
        type=int,
        metavar="N",
        help="record the CUDA allocator for N steps: memory-snapshot-stepS.pickle in the run dir, "
        "for https://pytorch.org/memory_viz (CUDA only)",
    )
    p.add_argument(
        "--on-alert",
        metavar="CMD",
        help="shell command run once per alert, the alert as one JSON object on its stdin "
        "(alerts.on_alert; rules and actions: the [alerts] table)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="run N processes with DDP through torchrun (torch.distributed.run); on several "
        "SLURM nodes (under srun) one torchrun per node, meeting at the first node",
    )
    p.add_argument(
        "--nnodes",
        type=int,
        metavar="N",
        help="with --nproc: N nodes, each running this command, meeting at --rdzv-endpoint",
    )
    p.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="with --nproc and --nnodes: where the nodes meet (torchrun's c10d rendezvous)",
    )
    return p


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """Translate the dedicated flags into `section.key=value` overrides (after --set)."""
    pairs: list[tuple[str, Any]] = [
        ("train.max_steps", args.max_steps),
        ("train.epochs", args.epochs),
        ("train.device", args.device),
        ("train.precision", args.precision),
        ("train.log_every", args.log_every),
        ("train.seed", args.seed),
        ("train.profile_steps", args.profile_steps),
        ("train.memory_snapshot_steps", args.memory_snapshot_steps),
        ("run.run_dir", args.run_dir),
        ("data.data_dir", args.data_dir),
        ("train.compile", None if args.compile is None else ("on" if args.compile else "off")),
        ("alerts.on_alert", args.on_alert),
    ]
    return overrides_from(pairs) + (["train.measure_peak=true"] if args.measure_peak else [])


MIN_DESCRIPTION_COLUMN = 30  # narrower: --list-presets prints each preset on one line
LAUNCHER_FLAGS = ("--nproc", "--nnodes", "--rdzv-endpoint")  # the launcher's, not the ranks'


def without_nproc(argv: list[str]) -> list[str]:
    """The command line for each rank: the same, minus --nproc, --nnodes and --rdzv-endpoint
    (rank 0 may draw the UI)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LAUNCHER_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in LAUNCHER_FLAGS)):
            out.append(arg)
    return out


def list_presets() -> int:
    """Each preset's name, then its description, wrapped at words to the terminal's width
    in a column of its own (no terminal: one line each)."""
    rows = describe_presets()
    width = max((len(name) for name, _ in rows), default=0)
    columns = shutil.get_terminal_size((0, 0)).columns
    room = columns - width - 2
    for name, desc in rows:  # a user preset's text is shown, never obeyed by the terminal
        default = " (default)" if name == DEFAULT_PRESET else ""
        text = strip_controls(f"{desc}{default}", one_line=True)
        if columns <= 0 or room < MIN_DESCRIPTION_COLUMN:
            print_out(strip_controls(f"{name:<{width}}  ", one_line=True) + text)
            continue
        lines = textwrap.wrap(text, room, break_on_hyphens=False) or [""]
        print_out(strip_controls(f"{name:<{width}}  ", one_line=True) + lines[0])
        for line in lines[1:]:
            print_out(" " * (width + 2) + line)
    return 0


def run_ui(cfg: Config, overrides: list[str], resume: dict[str, Any] | None = None) -> int:
    """The dashboard over `cfg` (resuming a checkpoint's `resume` state, when given)."""
    try:
        from tuitrain.ui.app import run_app
    except ImportError as exc:  # the UI is optional at import time; headless always works
        print(f"tuitrain: the UI cannot start ({exc}); running headless.", file=sys.stderr)
        return run_headless(cfg, resume=resume)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # rank 0 of a torchrun job: the UI, and the job's process group
        from tuitrain.host.launch import run_ui_rank0

        ended = run_ui_rank0(cfg, overrides, resume)
    else:
        ended = run_app(cfg, overrides, resume=resume)
    from tuitrain.rundir.ending import print_ending

    # the dashboard is gone: what happened, what next, about the run dir its host made last
    print_ending(ended.run_dir)
    return ended.code


def nproc_device(args: argparse.Namespace, overrides: list[str]) -> str:
    """The device the ranks will ask for (`train.device`), so that `--nproc` can be checked
    against the visible GPUs before any rank starts. A resumed run keeps its checkpoint's
    config, which each rank reads: only an explicit --device counts there."""
    if args.resume:
        return args.device or "auto"
    return load_preset(args.preset or DEFAULT_PRESET, overrides).train.device


def draws_ui(args: argparse.Namespace, main_rank: bool) -> bool:
    """True when this process draws the dashboard: not --no-ui, rank 0, and a terminal to
    draw on (else one line says why it runs headless)."""
    if args.no_ui or not main_rank:  # other ranks never draw
        return False
    from tuitrain.host.stdio import can_draw_ui

    if why := can_draw_ui():  # the check every command makes before its UI
        print(
            f"tuitrain: {why}: running headless (line logs); pass --no-ui to silence this "
            "line, or run in a terminal with TERM set (e.g. xterm-256color) for the "
            "dashboard.",
            file=sys.stderr,
        )
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """`tuitrain [flags]`: train a preset (the dashboard or headless), or launch --nproc ranks."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.list_presets:
        return list_presets()
    try:
        if args.preset is not None and not args.preset.strip():
            raise UserError("--preset is empty; name one from tuitrain --list-presets or a file.")
        if args.resume is not None and not args.resume.strip():
            raise UserError("--resume is empty; pass a checkpoint file, or auto with --run-dir.")
        for flag, value in (("--resume", args.resume), ("--run-dir", args.run_dir),
                            ("--data-dir", args.data_dir), ("--preset", args.preset)):  # fmt: skip
            if value and value != "auto":
                usable_path(value, flag)
        overrides = args.overrides + flag_overrides(args)
        if (args.nnodes is not None or args.rdzv_endpoint) and args.nproc is None:
            raise UserError("--nnodes and --rdzv-endpoint launch ranks: add --nproc N (per node).")
        if args.nproc is not None and "WORLD_SIZE" not in os.environ:
            from tuitrain.host.launch import launch_nproc

            device = nproc_device(args, overrides)
            ranks = without_nproc(argv)
            return launch_nproc(args.nproc, ranks, device, args.nnodes, args.rdzv_endpoint)
        main_rank = int(os.environ.get("RANK", "0")) == 0
        if args.resume:
            if main_rank:  # said now, not after torch's import
                refuse_if_held(args.run_dir or resumed_run_dir(args.resume))
            defer_signals()  # resume_config imports torch to read the checkpoint
            cfg, state = resume_config(args, overrides)
            if not draws_ui(args, main_rank):
                return run_headless(cfg, resume=state)
            if early := early_signal():  # Ctrl-C while the checkpoint was read
                print(f"tuitrain: stopped by {early[0]} before training started.", file=sys.stderr)
                return early[1]
            undefer_signals()  # the dashboard takes the signals its own way
            return run_ui(cfg, overrides, resume=state)  # a resumed run: the dashboard too
        cfg = load_preset(args.preset or DEFAULT_PRESET, overrides)
        if cfg.run.run_dir and main_rank:
            refuse_if_held(cfg.run.run_dir)
        if not draws_ui(args, main_rank):
            return run_headless(cfg)
        return run_ui(cfg, overrides)
    except UserError as exc:
        print(f"tuitrain: error: {exc}", file=sys.stderr)
        return exc.exit_code
