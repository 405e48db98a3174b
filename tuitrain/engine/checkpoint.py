"""Checkpoints that never lose a run: atomic writes, safe loads, exact resume.

Write: a temp file in the same directory, fsync, rename, fsync the directory, then move the
`latest` pointer, then prune old ones. A crash at any point leaves the earlier checkpoints
whole. Read: `torch.load(weights_only=True)` only: a file carrying a pickle payload is
refused, never retried with `weights_only=False`.

A sharded checkpoint (FSDP: `checkpoint.format`) is a folder, ckpt-step<N>.dcp, that
torch.distributed.checkpoint (DCP) writes: every rank its own shard of the model and
optimizer state, beside rank 0's `state.pt` (everything else: step, config, scheduler, RNG,
readable with a plain torch.load) and each other rank's own `rank<R>.pt`. It is written
into a temp folder and renamed into place by rank 0 once every rank has agreed its part is
on disk, so a crash mid-save leaves no folder that `list_checkpoints` lists. DCP reads its
`.metadata` with a bare `pickle.load`, and non-tensor items with `weights_only=False`; ours
holds tensors only, and `load_checkpoint` unpickles the metadata itself with an allow-list
of DCP's own record classes (`SafeUnpickler`) and refuses any non-tensor item, so a sharded
checkpoint is no more able to run code than a whole one. It is read whole (every shard,
no process group: the world size it resumes on is free), then used as a whole one is.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import pickle
import random
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from tuitrain.core.errors import UserError
from tuitrain.core.safefile import NotRegular, open_nofollow, open_regular, read_regular_text
from tuitrain.rundir.layout import CKPT_DIR

LATEST = "latest"
_NAME = re.compile(r"^ckpt-step(\d{8})\.(pt|dcp)$")  # a whole file or a sharded folder
_RANK_NAME = re.compile(r"^ckpt-step(\d{8})\.rank(\d+)\.pt$")  # another DDP rank's own state
_MAIN_TMP = re.compile(r"^\.ckpt-step\d{8}\.pt\.tmp-(\d+)$")  # rank 0's temp files only
_SHARDED_TMP = re.compile(r"^\.ckpt-step\d{8}\.dcp\.tmp(-old)?$")  # a sharded save's temp folder
SHARDED = ".dcp"
MAIN_STATE = "state.pt"  # in a sharded checkpoint: rank 0's state less the model and optimizer
# every name a sharded checkpoint may hold: DCP's metadata and shard files, and ours
_SHARDED_FILE = re.compile(r"^(\.metadata|state\.pt|rank\d+\.pt|__\d+_\d+\.distcp)$")
FULL_DISK_BYTES = 64 * 2**20  # a failed write with less free than this: the disk is full


class CheckpointError(UserError):
    """A checkpoint that cannot be read or used (exit 2: it is an input problem)."""


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CKPT_DIR


def checkpoint_name(step: int, sharded: bool = False) -> str:
    return f"ckpt-step{step:08d}{SHARDED if sharded else '.pt'}"


def is_sharded(checkpoint: Path) -> bool:
    """A sharded checkpoint's folder (by its name: a whole one is a .pt file)."""
    return checkpoint.name.endswith(SHARDED)


def rank_state_path(checkpoint: Path, rank: int) -> Path:
    """Where DDP rank `rank` (> 0) keeps its own RNG and loss window for `checkpoint`: beside
    a whole one, inside a sharded one."""
    if is_sharded(checkpoint):
        return checkpoint / f"rank{rank}.pt"
    return checkpoint.with_name(f"{checkpoint.stem}.rank{rank}.pt")


# ----------------------------------------------------------------------------- RNG state


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU and CUDA) generator states, as weights_only-safe types."""
    # the default legacy=True gives the MT19937 tuple; numpy's stubs type the call as a dict
    np_state = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np_state
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_name, torch.from_numpy(np_keys.copy()), np_pos, np_has_gauss, np_gauss],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, gauss_np = state["numpy"]
    np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss_np))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------- save


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomic(path: Path, write: Any) -> None:
    """Write through `write(file)` into a temp file beside `path`, fsync, rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a crashed run's leftover of this pid, or a link: the name only
        with open_nofollow(tmp, "xb") as f:  # never through a link planted under that name
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except RuntimeError as exc:
        # torch's zip writer turns a failed write (ENOSPC midway) into a RuntimeError
        # ("unexpected pos"): a failed save, like any OSError, never a bug that ends the run
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_failure(path, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def write_failure(path: Path, exc: RuntimeError) -> OSError:
    """The OSError to report for a writer's RuntimeError: ENOSPC when the disk is full."""
    free = None
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(path.parent).free
    if free is not None and free < FULL_DISK_BYTES:
        return OSError(errno.ENOSPC, f"No space left on device ({free:,} bytes free)")
    return OSError(errno.EIO, f"torch.save failed: {str(exc).splitlines()[0][:200]}")


def save_checkpoint(run_dir: Path, state: dict[str, Any], keep: int) -> Path:
    """Save atomically as ckpt-step<N>.pt, point `latest` at it, keep the newest `keep`."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / checkpoint_name(int(state["step"]))
    _write_atomic(path, lambda f: torch.save(state, f))
    _write_atomic(folder / LATEST, lambda f: f.write(path.name.encode() + b"\n"))
    prune(folder, keep, current=path)
    return path


def save_rank_state(run_dir: Path, step: int, rank: int, state: dict[str, Any], keep: int) -> Path:
    """DDP ranks other than 0: their own RNG and loss window beside rank 0's checkpoint of the
    same step (rank 0 saves the shared state), atomically; keep the newest `keep` of them."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = rank_state_path(folder / checkpoint_name(step), rank)
    _write_atomic(path, lambda f: torch.save(state, f))
    own = sorted(
        (p for p in folder.glob(f"ckpt-step*.rank{rank}.pt") if _RANK_NAME.match(p.name)),
        key=lambda p: p.name,
        reverse=True,
    )
    for old in own[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return path


Agree = Callable[[bool], bool]  # each rank's flag in, True only where every rank's is (collective)


def save_sharded(
    run_dir: Path,
    step: int,
    rank: int,
    shards: dict[str, Any],
    own: dict[str, Any],
    keep: int,
    agree: Agree,
    world_size: int = 1,
) -> Path:
    """Every rank, at the same step: its shard of `shards` (model and optimizer tensors,
    DTensors under FSDP) through DCP and its `own` state (rank 0: the checkpoint's state.pt,
    the others: rank<R>.pt) into ckpt-step<N>.dcp's temp folder; once every rank says its
    part is on disk, rank 0 checks that it sees every rank's part there (nodes that share no
    filesystem each wrote into a folder of their own), renames the folder into place, moves
    `latest` and prunes, and the ranks agree once more on that. A failure anywhere raises
    OSError on every rank (every rank's next save starts from the same point) and leaves no
    checkpoint of this step."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    folder = checkpoint_dir(run_dir)
    path = folder / checkpoint_name(step, sharded=True)
    tmp = folder / f".{path.name}.tmp"
    error: OSError | None = None
    if rank == 0:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _remove(tmp)  # a crashed save's leftover
            tmp.mkdir()
        except OSError as exc:
            error = exc
    if not agree(error is None):
        raise error or OSError(errno.EIO, f"rank 0 could not make {tmp.name}")
    try:
        dcp.save(shards, storage_writer=dcp.FileSystemWriter(tmp, sync_files=True))
        name = MAIN_STATE if rank == 0 else f"rank{rank}.pt"
        _write_atomic(tmp / name, lambda f: torch.save(own, f))
    except OSError as exc:
        error = exc
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - DCP's: on every rank
        error = write_failure(tmp, RuntimeError(dcp_error(exc)))
    if not agree(error is None):
        if rank == 0:
            _remove(tmp)
        raise error or OSError(errno.EIO, "another rank could not write its shard")
    if rank == 0:
        try:
            unseen = [r for r in range(1, world_size) if not (tmp / f"rank{r}.pt").is_file()]
            if unseen:
                raise OSError(
                    errno.ENOENT,
                    f"rank {unseen[0]}'s part of the checkpoint is not in {tmp} as rank 0 sees"
                    " it: ranks on several nodes need a run dir every node shares, or"
                    " checkpoint.format = 'whole'",
                )
            _fsync_dir(tmp)
            old = folder / f".{path.name}.tmp-old"
            if path.exists():  # the same step saved before (a resume from an earlier one)
                _remove(old)
                os.replace(path, old)
            os.replace(tmp, path)
            _fsync_dir(folder)
            _remove(old)
            _write_atomic(folder / LATEST, lambda f: f.write(path.name.encode() + b"\n"))
        except OSError as exc:
            error = exc
            _remove(tmp)
    if not agree(error is None):
        raise error or OSError(errno.EIO, "rank 0 could not put the checkpoint in place")
    if rank == 0:
        prune(folder, keep, current=path)
    return path


def dcp_error(exc: BaseException) -> str:
    """A DCP failure in one line: the first rank's own error, not DCP's wrapper of it."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        inner = getattr(next(iter(failures.values())), "exception", None)
        if isinstance(inner, BaseException):
            exc = inner
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {text}"[:160]


def load_rank_state(checkpoint: Path, rank: int) -> dict[str, Any] | None:
    """Rank `rank`'s own state saved with `checkpoint`; None when there is none usable."""
    path = rank_state_path(checkpoint, rank)
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, OSError):
        return None


def prune(folder: Path, keep: int, current: Path | None = None) -> None:
    """Keep `current` (the checkpoint just saved: the newest of this line of training) and
    the `keep` - 1 newest before it; delete the older ones, and stale temp files (rank 0's
    own kind only: another rank may be writing its state file right now). Checkpoints of a
    later step than `current` belong to a future this run abandoned by resuming from an
    earlier one: retention neither counts nor deletes them (`latest` says which is current).
    """
    for stale in folder.glob(".ckpt-step*.tmp*"):
        match = _MAIN_TMP.match(stale.name)
        if match and match.group(1) != str(os.getpid()):
            with contextlib.suppress(OSError):
                stale.unlink()
        elif _SHARDED_TMP.match(stale.name):  # a sharded save that never finished
            _remove(stale)
    found = list_checkpoints(folder)
    if current is not None:
        older = [p for p in found if p.name < current.name]
        doomed = older[max(keep - 1, 0) :]
    else:
        doomed = found[keep:]
    for old in doomed:
        _remove(old)


def _remove(path: Path) -> None:
    """Delete a checkpoint file or folder (a link: the link only), as far as it goes."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def list_checkpoints(folder: Path) -> list[Path]:
    """Complete checkpoints, whole and sharded (temp files and folders never match), newest
    step first."""
    found = [p for p in folder.glob("ckpt-step*") if _NAME.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


# ----------------------------------------------------------------------------- load


ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive; anything else is not ours


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load with weights_only=True; every way a file can be bad is one clear sentence, and
    a FIFO, device or socket in its place is refused without being opened for long (no hang).
    A sharded checkpoint (a ckpt-step*.dcp folder) is read whole: the same dict as a whole
    one's."""
    if path.is_dir() and not path.is_symlink() and is_sharded(path):
        return load_sharded(path)
    state = _load_file(path)
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise CheckpointError(f"{path} is not a tuitrain checkpoint (no model/step in it).")
    return state


def _load_file(path: Path) -> Any:
    """One file torch.save wrote, loaded with weights_only=True (see `load_checkpoint`)."""
    fix = "pass a ckpt-step*.pt file, or --resume auto --run-dir RUN_DIR"
    try:
        f = open_regular(path, "rb", fix)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist; check the path.") from None
    except NotRegular as exc:
        if path.is_dir():
            raise CheckpointError(
                f"checkpoint {path} is a folder, not a sharded checkpoint (ckpt-step*.dcp); "
                "pass a ckpt-step*.pt file or ckpt-step*.dcp folder in it, "
                "or --resume auto --run-dir RUN_DIR."
            ) from None
        raise CheckpointError(f"checkpoint {exc}") from None
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({exc.strerror or type(exc).__name__}); "
            "check its permissions."
        ) from None
    with f:
        head = f.read(len(ZIP_MAGIC))
        if not head:
            raise CheckpointError(
                f"checkpoint {path} is empty (a save was interrupted?); "
                "use --resume auto to pick the newest complete one."
            )
        if head != ZIP_MAGIC:
            raise CheckpointError(
                f"{path} is not a tuitrain checkpoint (not a file torch.save writes: it does "
                "not start as a zip archive); pass a ckpt-step*.pt that a run saved."
            )
        f.seek(0)
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            text = str(exc)
            if "GLOBAL" not in text:  # an opcode torch's safe loader does not know: garbage
                raise CheckpointError(
                    f"checkpoint {path} is truncated or corrupt (its data is not what "
                    "torch.save writes); use --resume auto to pick the newest complete one."
                ) from None
            lines = [ln.strip() for ln in text.splitlines() if "GLOBAL" in ln]
            first = (lines[0] if lines else text.strip().splitlines()[0])[:200]
            raise CheckpointError(
                f"checkpoint {path} was refused: it holds objects other than tensors and "
                f"plain data, which could run code when loaded ({first}); only load files "
                "you trust."
            ) from None
        except Exception as exc:  # noqa: BLE001 - however torch.load fails, the file is bad
            raise CheckpointError(
                f"checkpoint {path} is truncated or corrupt ({type(exc).__name__}); "
                "use --resume auto to pick the newest complete one."
            ) from None
    return state


# DCP's own record classes: what a sharded checkpoint's .metadata may name, nothing else
_DCP_RECORDS = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties",
        "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},  # a layout by its name
    "torch": {"Size"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
}  # fmt: skip


class SafeUnpickler(pickle.Unpickler):
    """Unpickles DCP's .metadata (a pickle DCP itself reads with a bare `pickle.load`)
    allowing only DCP's record classes, torch.Size, dtypes and layouts: a file naming any
    other global is refused before anything of it runs."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _DCP_RECORDS.get(module, ()) or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"GLOBAL {module}.{name} is not allowed")


def read_sharded_metadata(path: Path) -> Any:
    """A sharded checkpoint's DCP metadata, unpickled by `SafeUnpickler` and checked to
    hold tensors only, in shard files of the folder itself."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

    file = path / ".metadata"
    fix = "pass a ckpt-step*.dcp folder that a run saved"
    try:
        with open_regular(file, "rb", fix) as f:
            metadata = SafeUnpickler(f).load()
    except FileNotFoundError:
        raise CheckpointError(
            f"checkpoint {path} has no .metadata (a save was interrupted?); use --resume "
            "auto to pick the newest complete one."
        ) from None
    except (OSError, UserError) as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None
    except pickle.UnpicklingError as exc:
        if "GLOBAL" in str(exc):
            raise CheckpointError(
                f"checkpoint {path} was refused: its .metadata names objects other than "
                f"DCP's records ({str(exc)[:160]}), which could run code when loaded; only "
                "load checkpoints you trust."
            ) from None
        raise CheckpointError(f"checkpoint {path} has a corrupt .metadata; {fix}.") from None
    except Exception:  # noqa: BLE001 - however unpickling fails, the file is bad
        raise CheckpointError(f"checkpoint {path} has a corrupt .metadata; {fix}.") from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise CheckpointError(f"checkpoint {path} has a .metadata that is not DCP's; {fix}.")
    for key, item in metadata.state_dict_metadata.items():
        if not isinstance(item, TensorStorageMetadata):
            raise CheckpointError(
                f"checkpoint {path} was refused: {str(key)[:80]} is not a tensor (DCP loads "
                "such items with a full unpickler, which could run code); only load "
                "checkpoints you trust."
            )
    for info in metadata.storage_data.values():
        if not (
            isinstance(info, _StorageInfo)
            and isinstance(info.relative_path, str)
            and info.relative_path.startswith("__")
            and _SHARDED_FILE.match(info.relative_path)
            and not getattr(info, "transform_descriptors", None)  # absent in older torch
        ):
            raise CheckpointError(
                f"checkpoint {path} names data outside its own shard files; {fix}."
            )
    check_sharded_names(path, metadata)
    check_sharded_bytes(path, metadata)
    return metadata


SHARDED_MODEL, SHARDED_OPTIM = "model.", "optim.state."  # what save_sharded's keys start with


def check_sharded_names(path: Path, metadata: Any) -> None:
    """Every key a sharded .metadata names is the model's (`model.<param>`) or its optimizer's
    state of one of those parameters (`optim.state.<param>.<name>`): any other would be loaded
    and then dropped unseen."""
    keys = [str(key) for key in metadata.state_dict_metadata]
    params = {k[len(SHARDED_MODEL) :] for k in keys if k.startswith(SHARDED_MODEL)}
    for key in keys:
        if key.startswith(SHARDED_MODEL):
            continue
        param = key[len(SHARDED_OPTIM) :].rpartition(".")[0]
        if not key.startswith(SHARDED_OPTIM) or param not in params:
            raise CheckpointError(
                f"checkpoint {path} was refused: its .metadata names {key[:80]!r}, which is "
                "neither a model parameter nor the optimizer state of one; it was altered: "
                "resume from another checkpoint."
            )


def check_sharded_bytes(path: Path, metadata: Any) -> None:
    """A .metadata costs what the shard files hold: each storage entry a range of its shard
    file, no two ranges sharing bytes, every tensor chunk stored once, and no more tensor bytes
    declared than are stored. A file naming one tensor's bytes under many names, or a small
    shard as a huge tensor, would otherwise be read into memory once per name (a 10 MB
    checkpoint naming one tensor 400 more times cost ~837 MiB more)."""
    sizes: dict[str, int] = {}
    ranges: dict[str, list[tuple[int, int]]] = {}
    stored = 0
    for info in metadata.storage_data.values():
        name = info.relative_path
        if name not in sizes:
            try:
                sizes[name] = os.lstat(path / name).st_size
            except OSError:
                sizes[name] = 0
        offset, length = info.offset, info.length
        if not (isinstance(offset, int) and isinstance(length, int)) or offset < 0 or length < 0:
            raise _over_budget(path, "a storage entry with no valid byte range")
        if offset + length > sizes[name]:  # cut short (a save interrupted), or altered
            raise CheckpointError(
                f"checkpoint {path} has a truncated or corrupt shard ({name} ends before the "
                "bytes its .metadata names); use --resume auto to pick the newest complete one."
            )
        ranges.setdefault(name, []).append((offset, offset + length))
        stored += length
    for spans in ranges.values():
        spans.sort()
        if any(start < end for (_, end), (start, _) in zip(spans, spans[1:], strict=False)):
            raise _over_budget(path, "one stretch of a shard file under several entries")
    chunks, declared = 0, 0
    for item in metadata.state_dict_metadata.values():
        itemsize = item.properties.dtype.itemsize
        for chunk in item.chunks:
            chunks += 1
            declared += math.prod(int(n) for n in chunk.sizes) * itemsize
    if chunks > len(metadata.storage_data) or declared > stored:
        raise _over_budget(
            path,
            f"{chunks:,} tensor chunks of {declared:,} bytes, where its shard files store "
            f"{len(metadata.storage_data):,} entries of {stored:,} bytes",
        )


def _over_budget(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} was refused: its .metadata names {what}, more than its shard "
        "files hold; it was altered: resume from another checkpoint."
    )


def load_sharded(path: Path) -> dict[str, Any]:
    """A ckpt-step*.dcp folder read whole in this process (no process group: any world
    size): its state.pt with the model's full tensors and the optimizer state in the
    optimizer's own format added, as a whole checkpoint holds them."""
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from tuitrain.engine.strategy import numbered_optimizer_state

    for entry in os.scandir(path):
        if not _SHARDED_FILE.match(entry.name) or not entry.is_file(follow_symlinks=False):
            raise CheckpointError(
                f"checkpoint {path} holds {entry.name!r:.60}, which a sharded checkpoint "
                "does not (only shard files, state.pt and rank<R>.pt); it was altered: "
                "resume from another checkpoint."
            )
    state = _load_file(path / MAIN_STATE)
    groups = state.get("param_groups") if isinstance(state, dict) else None
    if not isinstance(groups, list) or "step" not in state or "model" in state:
        raise CheckpointError(
            f"{path} is not a tuitrain checkpoint (its state.pt has no step/param_groups)."
        )
    metadata = read_sharded_metadata(path)

    class Reader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            # the checked one (DCP's own would pickle.load the file again), as DCP's has it
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    shards: dict[str, Any] = {}
    try:
        # DCP's own dcp_to_torch_save does this: the state dict rebuilt from the metadata
        _load_state_dict(
            shards, storage_reader=Reader(path), planner=_EmptyStateDictLoadPlanner(),
            no_dist=True,
        )  # fmt: skip
        optimizer = numbered_optimizer_state(
            {"state": shards.get("optim", {}).get("state", {}), "param_groups": groups}
        )
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - a shard is bad
        raise CheckpointError(
            f"checkpoint {path} has a truncated or corrupt shard ({dcp_error(exc)}); use --resume "
            "auto to pick the newest complete one."
        ) from None
    del state["param_groups"]
    return {**state, "model": shards.get("model", {}), "optimizer": optimizer}


def find_latest(run_dir: Path, skipped: list[str] | None = None) -> Path:
    """The checkpoint `--resume auto` takes: the one `latest` names (the newest of the line of
    training that saved last), else the newest by step that loads. Each checkpoint passed
    over because it does not load is appended to `skipped` as one line."""
    folder = checkpoint_dir(run_dir)
    candidates = list_checkpoints(folder) if folder.is_dir() else []
    with contextlib.suppress(OSError, UserError):  # a FIFO there: not read, not waited on
        named = read_regular_text(folder / LATEST, limit=4096).strip()
        if _NAME.match(named) and (folder / named).exists():
            candidates = [folder / named, *[p for p in candidates if p.name != named]]
    for path in candidates:
        try:
            load_checkpoint(path)
        except CheckpointError as exc:
            if skipped is not None:
                skipped.append(f"skipped {path.name}: {exc}")
            continue
        return path
    raise CheckpointError(
        f"no complete checkpoint in {folder}; pass --run-dir of a run that saved one, "
        "or --resume PATH."
    )


def check_compatible(state: dict[str, Any], model: torch.nn.Module, preset: str) -> None:
    """Refuse a checkpoint of another preset or model, naming the mismatch."""
    saved_preset = state.get("preset")
    if saved_preset is not None and not isinstance(saved_preset, str):
        raise CheckpointError(
            f"checkpoint names no preset ({saved_preset!r:.40}); it was altered: resume from "
            "another checkpoint."
        )
    if saved_preset and saved_preset != preset:
        raise CheckpointError(
            f"checkpoint is of preset '{saved_preset}', this run is '{preset}'; "
            f"resume with --preset {saved_preset} or start a new run."
        )
    own = model.state_dict()
    saved = state.get("model")
    if not isinstance(saved, dict) or not all(isinstance(v, torch.Tensor) for v in saved.values()):
        raise CheckpointError("checkpoint does not fit this model: its weights are no tensors.")
    missing = sorted(set(own) - set(saved))
    extra = sorted(set(saved) - set(own))
    if missing or extra:
        what = f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}"
        raise CheckpointError(f"checkpoint does not fit this model: {what} parameters.")
    for key, tensor in own.items():
        if tuple(saved[key].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"checkpoint does not fit this model: {key} has shape "
                f"{tuple(saved[key].shape)} there and {tuple(tensor.shape)} here."
            )
        if saved[key].dtype != tensor.dtype:
            raise CheckpointError(
                f"checkpoint does not fit this model: {key} is {saved[key].dtype} there and "
                f"{tensor.dtype} here."
            )
