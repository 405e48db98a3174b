"""Headless runs: one process, or one rank of a torchrun job; and `--nproc N` launching.

Rank 0 alone prints (or draws the UI), writes the metrics file and checkpoints; other ranks are
quiet and log to rank-N.log in the same run dir (rank 0 picks it and broadcasts it). Every run
goes through `tuitrain.host.run.RunHost`; the ranks follow rank 0 from run to run
(`tuitrain.host.run.serve_rank`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tuitrain import __version__
from tuitrain.core.config import Config
from tuitrain.core.errors import EXIT_FAILED, EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM, UserError
from tuitrain.host.signals import LAUNCHER_ENV, SIGNAL_NAMES, defer_signals, early_signal
from tuitrain.host.stdio import print_out
from tuitrain.rundir.layout import RunDir

if TYPE_CHECKING:
    from tuitrain.host.run import RunExit, RunHost
    from tuitrain.metrics.sinks import Sink


def run_dir_of_checkpoint(path: Path) -> Path:
    """The run dir a checkpoint lies in (<run_dir>/checkpoints/ckpt-stepN.pt), or a refusal:
    its parent's parent (a home directory, say) is no run dir to write in."""
    from tuitrain.rundir.layout import CKPT_DIR, resumed_run_dir

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
    stacks = RunDir(cfg.run.run_dir).stacks if cfg.run.run_dir else None
    device = "cuda" if wants_cuda else "cpu"
    ddp.init_process_group(info, cfg.distributed.timeout_s, device, stacks)
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
    """Rank 0 headless: the metrics file, line logs on stdout/stderr and in the train log."""
    from tuitrain.metrics.sinks import ConsoleSink, JsonlSink

    assert host.run_dir is not None
    print_out(f"tuitrain {__version__}: preset {host.cfg.name}, run dir {host.run_dir}")
    return [JsonlSink(RunDir(host.run_dir).metrics), ConsoleSink(), ConsoleSink(log, log)]


def run_ui_rank0(
    cfg: Config, overrides: Sequence[str], resume: dict[str, Any] | None = None
) -> RunExit:
    """Rank 0 of a torchrun job with a terminal: the dashboard, its engine thread on rank 0
    (its exit code and the run dir it wrote last)."""
    from tuitrain.ui.app import run_app

    with process_group(cfg) as info:
        dist = info if info.world_size > 1 else None
        return run_app(cfg, overrides, dist=dist, resume=resume)


SLURM_PORT_BASE = 29500  # the rendezvous port under SLURM: this + SLURM_JOB_ID mod SPAN
SLURM_PORT_SPAN = 1000  # jobs whose ids differ by a multiple of this would share a port:
# the first node bind-tests it before torchrun starts (`check_port_free`)
MASTER_PORT_FIX = "unset it (tuitrain then picks one from SLURM_JOB_ID) or set a free port"
RDZV_ID = "tuitrain"  # the rendezvous id of a plain several-node launch (--nnodes)
SLURM_SPECIAL_STEPS = 0xFFFFFFF0  # step ids from here on: the batch, extern, interactive steps


def launcher_args(
    nproc: int,
    env: Mapping[str, str],
    nnodes: int | None = None,
    rdzv_endpoint: str | None = None,
) -> list[str]:
    """torchrun's arguments before the command: one node (`--standalone`); several through
    a c10d rendezvous, from --nnodes and --rdzv-endpoint, else from SLURM's variables when the
    job has more than one node."""
    if nproc < 1:
        raise UserError(f"--nproc {nproc} must be at least 1.")
    per_node = f"--nproc_per_node={nproc}"
    if (nnodes is None) != (rdzv_endpoint is None):
        raise UserError(
            "--nnodes and --rdzv-endpoint go together: pass both (the same on every node, the "
            "endpoint HOST:PORT on one of them), or neither for one node."
        )
    if nnodes is not None and rdzv_endpoint is not None:
        if nnodes < 1:
            raise UserError(f"--nnodes {nnodes} must be at least 1.")
        if not rdzv_endpoint.strip() or rdzv_endpoint.startswith(":"):
            raise UserError(f"--rdzv-endpoint {rdzv_endpoint!r} must be HOST or HOST:PORT.")
        endpoint_port(rdzv_endpoint)
        return [f"--nnodes={nnodes}", per_node, "--rdzv_backend=c10d",
                f"--rdzv_endpoint={rdzv_endpoint}", f"--rdzv_id={RDZV_ID}"]  # fmt: skip
    slurm = slurm_rendezvous(env)
    return [*slurm, per_node] if slurm else ["--standalone", per_node]


def _slurm(env: Mapping[str, str], *names: str) -> str:
    """The first of SLURM's variables `names` that is set (a job step's before the job's)."""
    return next((env[n].strip() for n in names if env.get(n, "").strip()), "")


def _slurm_int(env: Mapping[str, str], *names: str) -> int | None:
    name = next((n for n in names if env.get(n, "").strip()), "")
    text = env[name].strip() if name else ""
    try:  # SLURM_TASKS_PER_NODE reads "2(x3),1": the first node's count
        return int(text.split("(")[0].split(",")[0]) if text else None
    except ValueError:
        raise UserError(f"SLURM variable {name}={text!r} is not a whole number.") from None


def slurm_rendezvous(env: Mapping[str, str]) -> list[str]:
    """torchrun's rendezvous for `tuitrain --nproc N` in a SLURM job step on several nodes:
    one torchrun per node, meeting at the step's first host; [] outside SLURM or on one node.
    SLURM's own disagreements (several tasks per node, a batch script outside srun) are one
    sentence each: torchrun would start N ranks per task, or wait for nodes that never come."""
    nodes = _slurm_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    if nodes is None or nodes < 2 or not _slurm(env, "SLURM_JOB_ID"):
        return []
    step = _slurm(env, "SLURM_STEP_ID", "SLURM_STEPID")
    if not step.isdigit() or int(step) >= SLURM_SPECIAL_STEPS:  # the batch script's own step
        raise UserError(
            f"this SLURM job has {nodes} nodes, but tuitrain --nproc runs outside srun (on one "
            "of them), so the other nodes would never join: start it on every node with "
            "srun --ntasks-per-node=1 tuitrain --nproc N ..., or pass --nnodes 1 "
            "--rdzv-endpoint localhost for one node."
        )
    tasks = _slurm_int(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
                       "SLURM_TASKS_PER_NODE")  # fmt: skip
    if tasks is not None and tasks > 1:
        raise UserError(
            f"SLURM starts {tasks} tasks per node, so torchrun would start --nproc ranks "
            f"{tasks} times on each node: launch with srun --ntasks-per-node=1 (torchrun "
            "starts the node's ranks itself)."
        )
    nodelist = _slurm(env, "SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
    if not nodelist:
        raise UserError(
            "SLURM_JOB_NODELIST is not set, so the first node (the rendezvous host) is "
            "unknown: run inside srun, or pass --nnodes and --rdzv-endpoint HOST:PORT."
        )
    job = _slurm(env, "SLURM_JOB_ID")
    given = env.get("MASTER_PORT", "").strip()
    if given:
        port = port_number(given, f"MASTER_PORT={given!r}", MASTER_PORT_FIX)
    else:
        port = SLURM_PORT_BASE + (int(job) if job.isdigit() else 0) % SLURM_PORT_SPAN
    host = first_host(nodelist)
    if is_this_host(host):  # the node that hosts the rendezvous store: is its port free?
        check_port_free(port, host, given)
    # no --node_rank (SLURM_NODEID): the c10d rendezvous numbers the nodes itself, torchrun
    # warns that it ignores one, and SLURM_NODEID counts the job's nodes, not the step's
    return [f"--nnodes={nodes}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={host}:{port}", f"--rdzv_id={job}"]  # fmt: skip


def port_number(text: str, what: str, fix: str) -> int:
    """`text` as a TCP port (1 to 65535), else one sentence naming `what` and the fix:
    torchrun would print a 46-line traceback and exit 1."""
    digits = text.strip()
    port = int(digits) if digits.isascii() and digits.isdigit() else -1
    if not 1 <= port <= 65535:
        raise UserError(f"{what} is not a port number (1 to 65535): {fix}.")
    return port


def endpoint_port(endpoint: str) -> int | None:
    """The port of a `HOST:PORT` rendezvous endpoint (`[v6]:PORT` too), None for a bare HOST
    (torchrun's default port); a port that is no port number is one sentence."""
    text = endpoint.strip()
    if text.startswith("["):  # [::1]:29400
        _, bracket, rest = text.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise UserError(f"--rdzv-endpoint {endpoint!r} must be HOST or HOST:PORT.")
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        port = text.rpartition(":")[2]
    else:  # a bare host, or a bare IPv6 address (no port)
        port = None
    if port is None:
        return None
    fix = "pass HOST or HOST:PORT with a free port, the same on every node"
    return port_number(port, f"--rdzv-endpoint {endpoint!r} has port {port!r}, which", fix)


def is_this_host(host: str) -> bool:
    """True when `host` (a SLURM node name) is this machine: its short name matches."""
    import socket

    mine = socket.gethostname().split(".")[0]
    return bool(mine) and host.split(".")[0] == mine


def check_port_free(port: int, host: str, given: str) -> None:
    """On the rendezvous host, before torchrun binds it: a port already taken (another job's
    rendezvous: SLURM job ids SLURM_PORT_SPAN apart map to the same port) is one sentence,
    not a rendezvous that times out or joins the other job."""
    import errno
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store binds
        try:
            probe.bind(("", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return  # not ours to judge (no IPv4 here, ...): torchrun says what it finds
            why = (
                "MASTER_PORT"
                if given
                else f"{SLURM_PORT_BASE} + SLURM_JOB_ID mod {SLURM_PORT_SPAN}"
            )
            raise UserError(
                f"the rendezvous port {port} ({why}) is already in use on {host}, the job's "
                "first node (another job's rendezvous?): set MASTER_PORT to a free port in the "
                "job's environment."
            ) from None


def first_host(nodelist: str) -> str:
    """The first host of SLURM's compressed node list (`node[01-04,07],gpu3` -> `node01`,
    `rack[1-2]-n[8-9]` -> `rack1-n8`), without `scontrol show hostnames`."""
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):  # the first item: up to a comma outside brackets
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            end = i
            break
    item, host = nodelist[:end].strip(), ""
    while "[" in item:
        head, _, rest = item.partition("[")
        inside, closed, item = rest.partition("]")
        if not closed:
            raise UserError(f"SLURM node list {nodelist!r} has an unclosed '['.")
        host += head + inside.split(",")[0].split("-")[0]  # the first number, its zeros kept
    host += item
    if not host:
        raise UserError(f"SLURM node list {nodelist!r} names no host.")
    return host


def launch_nproc(
    nproc: int,
    argv: list[str],
    device: str = "auto",
    nnodes: int | None = None,
    rdzv_endpoint: str | None = None,
) -> int:
    """`tuitrain --nproc N ...`: the same command under torch's elastic launcher (torchrun),
    on one node, or on several (`launcher_args`: --nnodes/--rdzv-endpoint, or SLURM's). On
    CUDA each rank needs a GPU of its own: more ranks than visible GPUs is refused here."""
    launcher = launcher_args(nproc, os.environ, nnodes, rdzv_endpoint)  # said before torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    from tuitrain.engine.device import check_nproc

    check_nproc(nproc, device)
    os.environ[LAUNCHER_ENV] = str(os.getpid())  # the ranks stop if this process goes away
    try:
        torchrun([*launcher, "-m", "tuitrain", *argv])
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
