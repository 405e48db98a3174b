"""Headless runs: one process, or one rank of a torchrun job; and `--nproc N` launching.

Rank 0 alone prints (or draws the UI), writes metrics.jsonl and checkpoints; other ranks are
quiet and log to rank-N.log in the same run dir (rank 0 picks it and broadcasts it).

The ranks follow rank 0 from run to run (`serve_rank`): before a run rank 0 broadcasts its
run dir (None: it could not start; everyone exits), after it the next run's config (a preset
switch from rank 0's UI) or None (everyone exits).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuitrain import __version__
from tuitrain.config import Config
from tuitrain.errors import EXIT_FAILED, EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM, UserError

if TYPE_CHECKING:
    from tuitrain.engine.control import Control


SIGNAL_NAMES = {
    signal.SIGINT: ("SIGINT", EXIT_SIGINT),
    signal.SIGTERM: ("SIGTERM", EXIT_SIGTERM),
    signal.SIGHUP: ("SIGHUP", EXIT_SIGHUP),
}
EARLY_SIGNALS: list[int] = []  # stop signals that came before the run's handlers were in place


def defer_signals() -> None:
    """Until the run installs its own handlers: note a stop signal instead of acting on it.

    A KeyboardInterrupt raised while torch is importing can be swallowed by torch's C++
    (NumPy's initialisation, pybind11's exec), leaving numpy half-imported ("module 'numpy'
    has no attribute 'multiply'" at the first step) or making CPython re-raise SIGINT at exit.
    The run reads EARLY_SIGNALS once its imports are done.
    """

    def note(signum: int, _frame: object) -> None:
        EARLY_SIGNALS.append(signum)

    for signum in SIGNAL_NAMES:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # nohup
        signal.signal(signum, note)


def install_signal_handlers(control: Control) -> None:
    """SIGINT/SIGTERM/SIGHUP: finish the current step, write the end, exit 130/143/129.

    SIGHUP is left alone when it is ignored (`nohup`): the run goes on after the SSH session.
    """
    names = SIGNAL_NAMES

    def on_signal(signum: int, _frame: object) -> None:
        name, code = names[signal.Signals(signum)]
        if control.stop_requested:  # a second Ctrl-C: leave now (or once a save is written)
            if control.state in ("completed", "stopped", "failed"):
                return  # the run is over and the process on its way out: nothing to cut
            if control.in_critical:
                control.leave_code = code
                return
            raise SystemExit(code)
        control.request_stop(f"stopped by {name}", exit_code=code)
        # SIGHUP: the terminal is gone and this print fails with EIO; raised here, in the
        # middle of a step, it would fail the run instead of stopping it.
        with contextlib.suppress(OSError, ValueError):
            print(f"tuitrain: {name} received, stopping after the current step", file=sys.stderr)

    for signum in names:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        signal.signal(signum, on_signal)


def resume_config(args: argparse.Namespace, overrides: list[str]) -> tuple[Config, dict[str, Any]]:
    """The checkpoint's own config (plus overrides) and its state; the run dir is its run dir."""
    from tuitrain.config import apply_overrides, config_from_dict
    from tuitrain.engine.checkpoint import CheckpointError, find_latest, load_checkpoint
    from tuitrain.engine.state import SOURCE_KEY

    if args.resume == "auto":
        if not args.run_dir:
            raise UserError(
                "--resume auto needs --run-dir: the run whose newest checkpoint to use."
            )
        path = find_latest(Path(args.run_dir))
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
    run_dir = path.resolve().parent.parent  # <run_dir>/checkpoints/ckpt-stepN.pt
    raw = apply_overrides(state["config"], [*overrides, f'run.run_dir="{run_dir}"'])
    return config_from_dict(raw, name=preset), state


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
    from tuitrain.engine.distributed import broadcast_object, farewell

    with process_group(cfg) as info:
        if info.world_size == 1:
            return _run_rank(cfg, resume, info)
        if not info.is_main:
            return serve_rank(cfg, resume, info)
        code = _run_rank(cfg, resume, info)
        broadcast_object(None, info)  # no next run: the other ranks exit
        farewell(info)
        return code


def run_ui_rank0(cfg: Config, overrides: Sequence[str]) -> int:
    """Rank 0 of a torchrun job with a terminal: the dashboard, its engine thread on rank 0."""
    from tuitrain.ui.app import run_app

    with process_group(cfg) as info:
        return run_app(cfg, overrides, dist=info if info.world_size > 1 else None)


class NoRun(Exception):
    """Rank 0 could not start the run (it says why on its own output)."""


def serve_rank(cfg: Config, resume: dict[str, Any] | None, info: Any) -> int:
    """A rank other than 0: run what rank 0 runs, until rank 0 says there is no next run."""
    from tuitrain.config import config_from_dict
    from tuitrain.engine.distributed import broadcast_object, farewell

    while True:
        try:
            code = _run_rank(cfg, resume, info)
        except NoRun:
            return EXIT_FAILED
        try:
            plan = broadcast_object(None, info)
        except Exception as exc:  # noqa: BLE001 - rank 0 is gone; the run said what happened
            print(f"tuitrain rank {info.rank}: lost rank 0 after the run: {exc}", file=sys.stderr)
            return code or EXIT_FAILED
        if plan is None:
            farewell(info)
            return code
        cfg, resume = config_from_dict(plan["config"], name=plan["preset"]), None


def _run_rank(cfg: Config, resume: dict[str, Any] | None, info: Any) -> int:
    from tuitrain.engine.control import Control
    from tuitrain.engine.distributed import broadcast_object
    from tuitrain.engine.rundir import prepare_run_dir, write_resolved_config
    from tuitrain.engine.trainer import run
    from tuitrain.metrics.sinks import ConsoleSink, FanOutSink, JsonlSink, Sink
    from tuitrain.ui.terminal import native_stderr_to

    if EARLY_SIGNALS and info.world_size == 1:  # nothing started yet: nothing to save
        name, code = SIGNAL_NAMES[signal.Signals(EARLY_SIGNALS[0])]
        print(f"tuitrain: stopped by {name} before training started.", file=sys.stderr)
        return code
    run_dir = None
    if info.is_main:
        try:
            run_dir = prepare_run_dir(cfg)
            write_resolved_config(run_dir, cfg)
        except BaseException:
            broadcast_object(None, info)  # the other ranks exit instead of waiting
            raise
    sent = broadcast_object(str(run_dir) if run_dir else None, info)
    if sent is None:
        raise NoRun
    run_dir = Path(sent)
    control = Control()
    install_signal_handlers(control)
    if EARLY_SIGNALS:  # DDP: every rank must reach the same stop, at the first agreed step
        name, code = SIGNAL_NAMES[signal.Signals(EARLY_SIGNALS.pop(0))]
        control.request_stop(f"stopped by {name} before training started", exit_code=code)
    log_name = "train.log" if info.is_main else f"rank-{info.rank}.log"
    # other ranks: native stderr (torch's warnings) too, so nothing scribbles over rank 0's UI
    quiet = native_stderr_to(run_dir / log_name) if not info.is_main else contextlib.nullcontext()
    with quiet, open(run_dir / log_name, "a", encoding="utf-8") as log:
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


def launch_nproc(nproc: int, argv: list[str], device: str = "auto") -> int:
    """`tuitrain --nproc N ...`: the same command under torch's elastic launcher (torchrun).
    On CUDA each rank needs a GPU of its own: more ranks than visible GPUs is refused here."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    from tuitrain.engine.device import check_nproc

    if nproc < 1:
        raise UserError(f"--nproc {nproc} must be at least 1.")
    check_nproc(nproc, device)
    try:
        torchrun(["--standalone", f"--nproc_per_node={nproc}", "-m", "tuitrain", *argv])
    except ChildFailedError as exc:
        codes = [f.exitcode for f in exc.failures.values()]
        for code in (EXIT_SIGTERM, EXIT_SIGINT, EXIT_SIGHUP, 2):
            if code in codes:
                return code
        return EXIT_FAILED
    return 0
