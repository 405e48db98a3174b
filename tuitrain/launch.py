"""Headless runs: one process, or one rank of a torchrun job; and `--nproc N` launching.

Rank 0 alone prints, writes metrics.jsonl and checkpoints; other ranks are quiet and log
to rank-N.log in the same run dir (rank 0 picks it and broadcasts it).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuitrain import __version__
from tuitrain.config import Config
from tuitrain.errors import EXIT_FAILED, EXIT_SIGINT, EXIT_SIGTERM, UserError

if TYPE_CHECKING:
    from tuitrain.engine.control import Control


def install_signal_handlers(control: Control) -> None:
    """SIGINT/SIGTERM: finish the current step, write the end, exit 130/143."""

    def on_signal(signum: int, _frame: object) -> None:
        name, code = (
            ("SIGINT", EXIT_SIGINT) if signum == signal.SIGINT else ("SIGTERM", EXIT_SIGTERM)
        )
        if control.stop_requested:  # a second Ctrl-C: leave now
            raise SystemExit(code)
        print(f"tuitrain: {name} received, stopping after the current step", file=sys.stderr)
        control.request_stop(f"stopped by {name}", exit_code=code)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def resume_config(args: argparse.Namespace, overrides: list[str]) -> tuple[Config, dict[str, Any]]:
    """The checkpoint's own config (plus overrides) and its state; the run dir is its run dir."""
    from tuitrain.config import apply_overrides, config_from_dict
    from tuitrain.engine.checkpoint import CheckpointError, find_latest, load_checkpoint

    if args.resume == "auto":
        if not args.run_dir:
            raise UserError(
                "--resume auto needs --run-dir: the run whose newest checkpoint to use."
            )
        path = find_latest(Path(args.run_dir))
    else:
        path = Path(args.resume)
    state = load_checkpoint(path)
    preset = str(state.get("preset", "custom"))
    if args.preset and Path(args.preset).stem != preset:
        raise CheckpointError(
            f"checkpoint {path} is of preset '{preset}', not '{args.preset}'; "
            f"drop --preset or pass --preset {preset}."
        )
    run_dir = path.resolve().parent.parent  # <run_dir>/checkpoints/ckpt-stepN.pt
    raw = apply_overrides(state["config"], [*overrides, f'run.run_dir="{run_dir}"'])
    return config_from_dict(raw, name=preset), state


def run_headless(cfg: Config, resume: dict[str, Any] | None = None) -> int:
    """Train without a UI; under torchrun (WORLD_SIZE > 1) as one rank of the job."""
    from tuitrain.engine import distributed as ddp

    info = ddp.env_dist_info()
    if info.world_size == 1:
        return _run_rank(cfg, resume, info)
    import torch

    wants_cuda = cfg.train.device in ("auto", "cuda") and torch.cuda.is_available()
    ddp.init_process_group(info, cfg.distributed.timeout_s, "cuda" if wants_cuda else "cpu")
    try:
        return _run_rank(cfg, resume, info)
    finally:
        ddp.destroy_process_group()


def _run_rank(cfg: Config, resume: dict[str, Any] | None, info: Any) -> int:
    from tuitrain.engine.control import Control
    from tuitrain.engine.distributed import broadcast_object
    from tuitrain.engine.rundir import prepare_run_dir, write_resolved_config
    from tuitrain.engine.trainer import run
    from tuitrain.metrics.sinks import ConsoleSink, FanOutSink, JsonlSink, Sink

    run_dir = None
    if info.is_main:
        run_dir = prepare_run_dir(cfg)
        write_resolved_config(run_dir, cfg)
    run_dir = Path(broadcast_object(str(run_dir) if run_dir else None, info))
    control = Control()
    install_signal_handlers(control)
    log_name = "train.log" if info.is_main else f"rank-{info.rank}.log"
    with open(run_dir / log_name, "a", encoding="utf-8") as log:
        sink: Sink = ConsoleSink(log, log)
        if info.is_main:
            sink = FanOutSink(JsonlSink(run_dir / "metrics.jsonl"), ConsoleSink(), sink)
            print(f"tuitrain {__version__}: preset {cfg.name}, run dir {run_dir}", flush=True)
        result = run(cfg, sink, control, run_dir=run_dir, resume=resume, dist=info)
        if result.traceback:
            log.write(result.traceback)  # the log keeps every traceback
            if result.is_bug:
                print(result.traceback, file=sys.stderr)
        sink.close()
    return result.exit_code


def launch_nproc(nproc: int, argv: list[str]) -> int:
    """`tuitrain --nproc N ...`: the same command under torch's elastic launcher (torchrun)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    if nproc < 1:
        raise UserError(f"--nproc {nproc} must be at least 1.")
    try:
        torchrun(["--standalone", f"--nproc_per_node={nproc}", "-m", "tuitrain", *argv])
    except ChildFailedError as exc:
        codes = [f.exitcode for f in exc.failures.values()]
        for code in (EXIT_SIGTERM, EXIT_SIGINT, 2):
            if code in codes:
                return code
        return EXIT_FAILED
    return 0
