"""The run dir's layout: every file and folder a run dir holds, named once, and the run dir
made ready for a run (made, proven writable, its later folders checked, its config written).

`RunDir(path)` is the run dir as one object: `RunDir(p).metrics` is its metrics file,
`.config`, `.train_log`, `.output_log`, `.checkpoints`, `.tensorboard`, `.lock`,
`.ranks_lock`, `.control`, `.ranks`, `.stacks`, `.manifest` the others. Nothing outside this
package spells a run dir's file names."""

from __future__ import annotations

import contextlib
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from tuitrain.core.config import Config
from tuitrain.core.errors import UserError
from tuitrain.core.safefile import kind_of, open_nofollow, temp_beside, write_atomic_text

METRICS_NAME = "metrics.jsonl"  # the run's records (the contract), rank 0's for a DDP run
CONFIG_NAME = "config.toml"  # the resolved config: `tuitrain --preset RUN/config.toml` reruns it
TRAIN_LOG = "train.log"  # the headless line logs (and a detached dashboard's)
OUTPUT_LOG = "output.log"  # what `tuitrain run`'s script printed, whole
CKPT_DIR = "checkpoints"  # <run_dir>/checkpoints/ckpt-stepN.pt (engine.checkpoint uses it)
TENSORBOARD_DIR = "tensorboard"  # event files, where train.tensorboard is on
LOCK_NAME = ".tuitrain.lock"  # rank 0 (or the only process): exclusive, for the run's life
RANKS_LOCK_NAME = ".tuitrain.ranks.lock"  # the other DDP ranks: shared, while they live
RUN_LOCK_NAME = ".tuitrain-run.lock"  # held by `tuitrain run` for its whole life
CONTROL_DIR = "control"  # a hosted run's inbox of steering requests (rundir.control)
RANKS_DIR = "ranks"  # a script's other ranks' reports (rundir.ranks)
STACKS_DIR = "stacks"  # the stalled-rank watch's stacks and NCCL traces
MANIFEST_NAME = ".tuitrain-runs.jsonl"  # `tuitrain run`'s list of the script's run dirs
NATIVE_STDERR = "native-stderr.log"  # the dashboard's native stderr (torch's C++ warnings)
UI_TRACEBACK = "ui-traceback.txt"  # where a failed dashboard's traceback is kept
PARITY_DIR = "parity"  # the dashboard's parity check, inside the run it was started from
PARITY_JSON = "parity.json"  # a parity check's result
PARITY_LOG = "parity.log"  # `tuitrain parity`'s line log (in place of train.log)
RUN_FILES = (METRICS_NAME, CONFIG_NAME, TRAIN_LOG)  # what a run dir holds early on
MAX_SUFFIX = 100_000  # fresh_dir tries <base>-2 ... up to this


class RunDir:
    """One run dir: its path and the path of every file and folder in it."""

    __slots__ = ("path",)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_NAME

    @property
    def config(self) -> Path:
        return self.path / CONFIG_NAME

    @property
    def train_log(self) -> Path:
        return self.path / TRAIN_LOG

    @property
    def output_log(self) -> Path:
        return self.path / OUTPUT_LOG

    @property
    def checkpoints(self) -> Path:
        return self.path / CKPT_DIR

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def lock(self) -> Path:
        return self.path / LOCK_NAME

    @property
    def ranks_lock(self) -> Path:
        return self.path / RANKS_LOCK_NAME

    @property
    def run_lock(self) -> Path:
        return self.path / RUN_LOCK_NAME

    @property
    def control(self) -> Path:
        return self.path / CONTROL_DIR

    @property
    def ranks(self) -> Path:
        return self.path / RANKS_DIR

    @property
    def stacks(self) -> Path:
        return self.path / STACKS_DIR

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST_NAME

    @property
    def native_stderr(self) -> Path:
        return self.path / NATIVE_STDERR

    @property
    def ui_traceback(self) -> Path:
        return self.path / UI_TRACEBACK

    @property
    def parity(self) -> Path:
        return self.path / PARITY_DIR

    @property
    def parity_json(self) -> Path:
        return self.path / PARITY_JSON

    def rank_log(self, rank: int) -> Path:
        """The line log of DDP rank `rank` (not 0: rank 0's is train.log)."""
        return self.path / f"rank-{rank}.log"

    def profile_table(self, step: int) -> Path:
        """torch.profiler's top table of the steps from `step`."""
        return self.path / f"profile-step{step}.txt"

    def profile_trace(self, step: int) -> Path:
        """The Chrome/Perfetto trace of the steps profiled from `step`."""
        return self.path / f"profile-step{step}.trace.json"

    def memory_snapshot(self, step: int) -> Path:
        """The CUDA allocator's history up to `step` (for pytorch.org/memory_viz)."""
        return self.path / f"memory-snapshot-step{step}.pickle"


def default_run_dir(cfg: Config) -> Path:
    """runs/<preset>-<stamp>: the name a run dir gets when nothing names it (fresh_dir makes
    it, or a free sibling)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.name}-{stamp}"


def fresh_dir(base: Path, first: int = 1) -> Path:
    """A folder made now by this call: `base` itself (first=1), else `base-2`, `base-3` ...
    (the first free one). Atomic: two processes asking at once never get the same one."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(first, MAX_SUFFIX):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name for a run dir beside {base}")


def prepare_run_dir(cfg: Config, run_dir: str | Path | None = None) -> Path:
    """Make the run dir and prove it is writable before any training starts. The run dir
    asked for (`run_dir`, else run.run_dir) is made or reused; without one, a fresh
    runs/<preset>-<stamp> is made (`-2`, `-3` ... when another run started in the same
    second): never a folder another run holds. Call it once a run and pass the path on
    (RunHost does): a second call without a run dir makes a second folder."""
    asked = run_dir or cfg.run.run_dir
    path = Path(asked).expanduser() if asked else default_run_dir(cfg)
    try:
        if asked:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path = fresh_dir(path)
        probe = temp_beside(path / ".write-test")
        with open_nofollow(probe, "x") as f:  # a name of its own: nothing planted is reused
            f.write("ok")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"run dir {path} is not writable ({reason}); pass --run-dir with a writable folder."
        ) from exc
    for name in (CKPT_DIR, TENSORBOARD_DIR):  # folders a run writes into later: refused now
        with contextlib.suppress(OSError):
            mode = os.lstat(path / name).st_mode
            if not stat.S_ISDIR(mode):
                raise UserError(
                    f"{path / name} is {kind_of(mode)}, where tuitrain keeps its {name} "
                    "folder; remove or rename it, or pass another --run-dir."
                )
    return path


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def config_to_toml(cfg: Config) -> str:
    """The resolved config as a preset file: `tuitrain --preset RUN/config.toml` reruns it."""
    lines = [f"# resolved config of preset {cfg.name}"]
    for section, values in cfg.to_dict().items():
        lines.append(f"\n[{section}]")
        lines += [f"{key} = {_toml_value(val)}" for key, val in values.items()]
    return "\n".join(lines) + "\n"


def write_resolved_config(run_dir: Path, cfg: Config) -> Path:
    return write_atomic_text(RunDir(run_dir).config, config_to_toml(cfg))


def sibling_run_dir(previous: Path | None, preset: str) -> Path | None:
    """A fresh run dir next to `previous` (runs/<preset>-<stamp>), made now by this call
    (fresh_dir: a run started elsewhere in the same second never shares it). Where it cannot
    be made, its name: prepare_run_dir then says why in the run's own failure."""
    if previous is None:
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return made_or_named(previous.parent / f"{preset}-{stamp}")


def made_or_named(base: Path) -> Path:
    """fresh_dir(base), the folder made by this call; where it cannot be made, `base` itself:
    prepare_run_dir then says why in the run's own failure."""
    try:
        return fresh_dir(base)
    except OSError:
        return base


def parity_run_dir(preset: str) -> Path:
    """A parity check's own run dir, made now: runs/parity-<preset>-<stamp> (-2, -3 ... when
    another check started in the same second)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return made_or_named(Path("runs") / f"parity-{preset}-{stamp}")


def resumed_run_dir(resume: str) -> Path | None:
    """The run dir `--resume PATH` continues in without --run-dir: <run_dir> of
    <run_dir>/checkpoints/ckpt-stepN.pt; None for `auto` or a file elsewhere."""
    if resume == "auto":
        return None
    path = Path(resume).expanduser().resolve()
    return path.parent.parent if path.parent.name == CKPT_DIR else None
