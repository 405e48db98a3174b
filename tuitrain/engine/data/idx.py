"""IDX files (the format MNIST and Fashion-MNIST ship in) and where to find Fashion-MNIST's.

We read IDX with our own code rather than through torchvision because Debian's
`dataset-fashion-mnist` package recompresses the files, so torchvision's md5 check refuses
them. Reading is one decompress plus `numpy.frombuffer`: no per-sample Python.

Lookup order for the full set: `data.data_dir` (the --data-dir flag), `$TUITRAIN_DATA`, the
user cache dir, the Debian package's folder, then a download through torchvision into the
user cache dir (disabled by `TUITRAIN_NO_DOWNLOAD=1`). Each folder may hold the files
directly or in torchvision's layout (`<dir>/FashionMNIST/raw/`).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import os
import shutil
import socket
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tuitrain.core.errors import UserError, usable_path

# split -> (images file, labels file), without the optional ".gz"
FILE_NAMES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
_UBYTE = 0x08  # the only IDX element type Fashion-MNIST uses
_GZIP_MAGIC = b"\x1f\x8b"
_DOWNLOAD_TIMEOUT_S = 5.0  # per socket operation; a blocked network must fail fast
_DOWNLOAD_HOST = "fashion-mnist.s3-website.eu-central-1.amazonaws.com"

Log = Callable[[str], None]


# --------------------------------------------------------------------------- the format


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when it is gzip (detected by content, not by name)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}.") from exc
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(f"{path} is not a valid gzip file ({exc}); download it again.") from exc


def read_idx(path: Path, ndim: int | None = None) -> torch.Tensor:
    """An IDX file (gzipped or not) as a uint8 tensor shaped as its header says.

    `ndim` checks the number of dimensions (3 for images, 1 for labels). Anything that does
    not match the header (magic number, element type, size) is a UserError naming the file.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise UserError(f"{path} is not an IDX file (bad magic number); download it again.")
    dtype_code, dims_count = data[2], data[3]
    if dtype_code != _UBYTE:
        raise UserError(f"{path} holds IDX type 0x{dtype_code:02x}; only unsigned bytes work.")
    if ndim is not None and dims_count != ndim:
        raise UserError(f"{path} has {dims_count} dimensions where {ndim} were expected.")
    header = 4 + 4 * dims_count
    if len(data) < header:
        raise UserError(f"{path} is truncated (its header is incomplete); download it again.")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=dims_count, offset=4))
    expected = header + math.prod(shape)  # Python ints: np.prod wraps past 2**63
    if len(data) != expected:
        raise UserError(
            f"{path} has {len(data)} bytes where its header {shape} implies {expected};"
            " the file is corrupt or truncated, download it again."
        )
    # copy() so the tensor owns writable memory (torch warns on read-only buffers)
    array = np.frombuffer(data, dtype=np.uint8, offset=header).copy()
    return torch.from_numpy(array).reshape(shape)


def write_idx(path: Path, data: torch.Tensor | np.ndarray) -> None:
    """Write uint8 data as an IDX file; gzipped (reproducibly: mtime 0) when the name ends .gz."""
    array = np.ascontiguousarray(data.numpy() if isinstance(data, torch.Tensor) else data)
    if array.dtype != np.uint8:
        raise ValueError(f"IDX writer supports uint8 only, not {array.dtype}")
    header = bytes([0, 0, _UBYTE, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + array.tobytes()
    path = Path(path)
    if path.name.endswith(".gz"):
        payload = gzip.compress(payload, compresslevel=9, mtime=0)
    path.write_bytes(payload)


# --------------------------------------------------------------------------- a folder's files


def _find_file(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def fashion_dir_in(folder: Path) -> Path | None:
    """`folder` or its torchvision layout (`FashionMNIST/raw`) when it holds all four files."""
    for candidate in (folder, folder / "FashionMNIST" / "raw"):
        stems = [stem for pair in FILE_NAMES.values() for stem in pair]
        if all(_find_file(candidate, stem) for stem in stems):
            return candidate
    return None


def read_split(folder: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(images N×H×W uint8, labels N int64) of one split ("train" or "val") in `folder`."""
    image_stem, label_stem = FILE_NAMES[split]
    image_path, label_path = _find_file(folder, image_stem), _find_file(folder, label_stem)
    if image_path is None or label_path is None:
        raise UserError(f"{folder} lacks {image_stem}(.gz) or {label_stem}(.gz).")
    images = read_idx(image_path, ndim=3)
    labels = read_idx(label_path, ndim=1)
    if len(images) != len(labels):
        raise UserError(
            f"{image_path} has {len(images)} images but {label_path} has {len(labels)} labels;"
            " one of them is from another set or truncated."
        )
    if images.numel() == 0:
        raise UserError(
            f"{image_path} holds no image ({'×'.join(map(str, images.shape))}); download it again."
        )
    return images, labels.long()


# --------------------------------------------------------------------------- lookup


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tuitrain" / "fashion-mnist"


def locate_fashion_mnist(data_dir: str = "", log: Log | None = None) -> Path:
    """The folder holding Fashion-MNIST's four IDX files, searched in the documented order."""
    if data_dir:
        # an explicit --data-dir that is wrong must not silently fall back to another copy
        explicit = usable_path(data_dir, "--data-dir")
        found = fashion_dir_in(explicit)
        if found is None:
            names = ", ".join(f"{stem}(.gz)" for pair in FILE_NAMES.values() for stem in pair)
            raise UserError(
                f"--data-dir {explicit} does not hold Fashion-MNIST's files ({names}); point "
                "it at the folder that holds them, or leave it out to use $TUITRAIN_DATA, "
                f"{user_cache_dir()} or {SYSTEM_DIR} (apt-get install dataset-fashion-mnist)."
            )
        return found
    candidates = [user_cache_dir(), SYSTEM_DIR]
    if os.environ.get("TUITRAIN_DATA"):
        candidates.insert(0, usable_path(os.environ["TUITRAIN_DATA"], "TUITRAIN_DATA"))
    for folder in candidates:
        found = fashion_dir_in(folder)
        if found is not None:
            return found
    reason = _download(user_cache_dir(), log)
    found = fashion_dir_in(user_cache_dir())
    if found is not None:
        return found
    raise UserError(
        "Fashion-MNIST was not found: pass --data-dir DIR with its four IDX files, or set"
        f" TUITRAIN_DATA=DIR, or put them in {user_cache_dir()}, or run"
        f" `sudo apt-get install dataset-fashion-mnist` (installs {SYSTEM_DIR}), or allow the"
        f" network download ({reason}); or use --preset fashion-mini, which needs no download."
    )


def _host_resolves(host: str, timeout_s: float) -> bool:
    """DNS lookups ignore socket timeouts, so bound one with a daemon thread."""
    result: list[bool] = []

    def lookup() -> None:
        try:
            socket.getaddrinfo(host, 80)
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(result and result[0])


def _download(cache_dir: Path, log: Log | None) -> str:
    """Try torchvision's download into `cache_dir`; returns why it did not happen, if so.

    Each process downloads into its own temporary folder and moves the files into place
    with atomic renames, so DDP ranks sharing a cache dir never see half-written files.
    """
    if os.environ.get("TUITRAIN_NO_DOWNLOAD", "") not in ("", "0"):
        return "disabled by TUITRAIN_NO_DOWNLOAD"
    if not _host_resolves(_DOWNLOAD_HOST, _DOWNLOAD_TIMEOUT_S):
        return f"{_DOWNLOAD_HOST} is unreachable"
    if log:
        log(f"downloading Fashion-MNIST into {cache_dir} (TUITRAIN_NO_DOWNLOAD=1 skips this)")
    tmp = cache_dir / f".download-{os.getpid()}"
    previous_timeout = socket.getdefaulttimeout()
    try:
        from torchvision.datasets import FashionMNIST  # heavy import, only when needed

        socket.setdefaulttimeout(_DOWNLOAD_TIMEOUT_S)  # torchvision's urlopen has no timeout
        sink = io.StringIO()  # torchvision prints and draws tqdm bars; keep the terminal ours
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            FashionMNIST(root=str(tmp), train=True, download=True)
        raw = tmp / "FashionMNIST" / "raw"
        for stem in (stem for pair in FILE_NAMES.values() for stem in pair):
            os.replace(raw / f"{stem}.gz", cache_dir / f"{stem}.gz")
        return "done"
    except Exception as exc:  # any failure just means "not downloaded"
        detail = " ".join(str(exc).split())[:300] or repr(exc)  # torchvision's are multi-line
        return f"it failed: {detail}"
    finally:
        socket.setdefaulttimeout(previous_timeout)
        shutil.rmtree(tmp, ignore_errors=True)
