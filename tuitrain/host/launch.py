"""Headless runs: one process, or one rank of a torchrun job; and `--nproc N` launching.

Rank 0 alone prints (or draws the UI), writes metrics.jsonl and checkpoints; other ranks are
quiet and log to rank-N.log in the same run dir (rank 0 picks it and broadcasts it). Every run
goes through `tuitrain.host.run.RunHost`; the ranks follow rank 0 from run to run
(`tuitrain.host.run.serve_rank`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tuitrain import __version__
from tuitrain.core.config import Config
from tuitrain.core.errors import EXIT_FAILED, EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM, UserError
from tuitrain.host.signals import LAUNCHER_ENV, SIGNAL_NAMES, defer_signals, early_signal
from tuitrain.host.stdio import print_out

if TYPE_CHECKING:
    from tuitrain.host.run import RunHost
    from tuitrain.metrics.sinks import Sink


def run_dir_of_checkpoint(path: Path) -> Path:
    """The run dir a checkpoint lies in (<run_dir>/checkpoints/ckpt-stepN.pt), or a refusal:
    its parent's parent (a home directory, say) is no run dir to write in."""
    from tuitrain.core.rundir import CKPT_DIR, resumed_run_dir

    run_dir = resumed_run_dir(str(path))
    if run_dir is not None:
        return run_dir
    raise UserError(
        f"checkpoint {path} is not in a run dir's {CKPT_DIR}/ folder, so there is no run "
        "to continue in; pass --run-dir for the resumed run's files."
    )


def resume_config(args: argparse.Namespace, overrides: list[str]) -> tuple[Config, dict[str, Any]]:
    """The checkpoint's own config (plus overrides) and its state. The run dir is --run-dir,
    else the run dir the checkpoint lies in; a checkpoint elsewhere needs --run-dir (its
    parent's parent, a home directory say, is no run dir to write in)."""
    from tuitrain.core.config import apply_overrides, config_from_dict

    # said before torch is imported (seconds on a small CPU); where the checkpoint lies is
    # checked after its contents, so a foreign file is named as such, not as misplaced
    if args.resume == "auto" and not args.run_dir:
        raise UserError("--resume auto needs --run-dir: the run whose newest checkpoint to use.")

    from tuitrain.engine.checkpoint import CheckpointError, find_latest, load_checkpoint
    from tuitrain.engine.state import SOURCE_KEY

    if args.resume == "auto":
        skipped: list[str] = []
        path = find_latest(Path(args.run_dir), skipped)
        for line in skipped:  # a corrupt newest checkpoint is named, not silently passed over
            print(f"tuitrain: --resume auto {line}", file=sys.stderr)
    else:
        path = Path(args.resume)
    state = load_checkpoint(path)
    state[SOURCE_KEY] = str(path)  # DDP ranks > 0 read their own state file beside it
    preset = str(state.get("preset", "custom"))
    if args.preset and Path(args.preset).stem != preset:
        raise CheckpointError(
            f"checkpoint {path} is of preset '{preset}', not '{args.preset}'; "
            f"drop --preset or pass --preset {preset}."
        )
    if not isinstance(state.get("config"), dict):
        raise CheckpointError(
            f"checkpoint {path} holds no run config, so it was not saved by tuitrain; "
            "resume from a ckpt-step*.pt file of a tuitrain run dir."
        )
    # --run-dir is the user's choice (the overrides carry it as run.run_dir)
    run_dir = Path(args.run_dir) if args.run_dir else run_dir_of_checkpoint(path)
    raw = apply_overrides(state["config"], [*overrides, f'run.run_dir="{run_dir}"'])
    check_factories(path, raw, overrides, args.preset)
    return config_from_dict(raw, name=preset), state


FACTORY_KEYS = ("task.name", "model.name", "data.name")  # imported and called
COMMAND_KEYS = ("alerts.on_alert",)  # a shell command


def check_factories(
    path: Path, raw: dict[str, Any], overrides: list[str], preset: str | None
) -> None:
    """A factory named by a checkpoint's saved config is imported and called on resume: that
    is running the file's code. Only factories the user named on this command line (an
    override) or in the preset passed with --preset may run."""
    from tuitrain.core.config import load_preset, parse_override
    from tuitrain.engine.checkpoint import CheckpointError

    touched = {".".join(parse_override(text)[0]) for text in overrides}
    own = load_preset(preset).to_dict() if preset else {}
    for key in (*FACTORY_KEYS, *COMMAND_KEYS):
        section, name = key.split(".")
        value = raw.get(section, {}).get(name) if isinstance(raw.get(section), dict) else None
        code = bool(value) if key in COMMAND_KEYS else ":" in str(value)
        if not isinstance(value, str) or not code or key in touched:
            continue
        if own.get(section, {}).get(name) == value:
            continue
        raise CheckpointError(
            f"checkpoint {path} names {key} = {value!r}, which resuming would "
            f"{'run' if key in COMMAND_KEYS else 'import and call'}; tuitrain runs only code "
            "you name: if you trust it, add "
            f"--set {key}='{value}' (or pass its preset with --preset)."
        )


@contextlib.contextmanager
def process_group(cfg: Config) -> Iterator[Any]:
    """torchrun's rank info, inside an initialised process group (none for one process)."""
    from tuitrain.engine import distributed as ddp

    info = ddp.env_dist_info()
    if info.world_size == 1:
        yield info
        return
    import torch

    wants_cuda = cfg.train.device in ("auto", "cuda") and torch.cuda.is_available()
    ddp.init_process_group(info, cfg.distributed.timeout_s, "cuda" if wants_cuda else "cpu")
    try:
        yield info
    finally:
        ddp.destroy_process_group()


def run_headless(cfg: Config, resume: dict[str, Any] | None = None) -> int:
    """Train without a UI; under torchrun (WORLD_SIZE > 1) as one rank of the job."""
    defer_signals()  # before the imports below pull in torch
    from tuitrain.host.run import RunHost, run_inline, serve_rank

    with process_group(cfg) as info:
        if info.world_size > 1 and not info.is_main:
            return serve_rank(cfg, resume, info)
        early = early_signal()
        if early and info.world_size == 1:  # nothing started yet: nothing to save
            print(f"tuitrain: stopped by {early[0]} before training started.", file=sys.stderr)
            return early[1]
        host = RunHost(cfg, dist=info, resume=resume, outputs=headless_outputs, steerable=True)
        result = run_inline(host)
        if result.traceback and result.is_bug:
            print(result.traceback, file=sys.stderr)  # the log has it too
        return int(result.exit_code)


def headless_outputs(host: RunHost, log: IO[str]) -> list[Sink]:
    """Rank 0 headless: metrics.jsonl, line logs on stdout/stderr and in train.log."""
    from tuitrain.metrics.sinks import ConsoleSink, JsonlSink

    assert host.run_dir is not None
    print_out(f"tuitrain {__version__}: preset {host.cfg.name}, run dir {host.run_dir}")
    return [JsonlSink(host.run_dir / "metrics.jsonl"), ConsoleSink(), ConsoleSink(log, log)]


def run_ui_rank0(
    cfg: Config, overrides: Sequence[str], resume: dict[str, Any] | None = None
) -> int:
    """Rank 0 of a torchrun job with a terminal: the dashboard, its engine thread on rank 0."""
    from tuitrain.ui.app import run_app

    with process_group(cfg) as info:
        dist = info if info.world_size > 1 else None
        return run_app(cfg, overrides, dist=dist, resume=resume)


def launch_nproc(nproc: int, argv: list[str], device: str = "auto") -> int:
    """`tuitrain --nproc N ...`: the same command under torch's elastic launcher (torchrun).
    On CUDA each rank needs a GPU of its own: more ranks than visible GPUs is refused here."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    from tuitrain.engine.device import check_nproc

    if nproc < 1:
        raise UserError(f"--nproc {nproc} must be at least 1.")
    check_nproc(nproc, device)
    os.environ[LAUNCHER_ENV] = str(os.getpid())  # the ranks stop if this process goes away
    try:
        torchrun(["--standalone", f"--nproc_per_node={nproc}", "-m", "tuitrain", *argv])
    except SignalException as exc:  # the launcher was signalled; torchrun passed it on
        name, code = SIGNAL_NAMES.get(int(exc.sigval), ("a signal", EXIT_FAILED))
        print(f"tuitrain: {name} received; the ranks stopped after saving.", file=sys.stderr)
        return code
    except ChildFailedError as exc:
        codes = [f.exitcode for f in exc.failures.values()]
        for code in (EXIT_SIGTERM, EXIT_SIGINT, EXIT_SIGHUP, 2):
            if code in codes:
                return code
        return EXIT_FAILED
    return 0
