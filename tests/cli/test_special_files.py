"""Nothing blocks on a special file: a FIFO, a directory, a socket or a device where a run
writes one of its files is refused in one sentence (exit 2) before anything is written, and
never hangs. The readers' side (watch, export, resume) has its own sweeps."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tuitrain.core.safefile import LinkRefused, NotRegular, open_nofollow, open_regular, replacing


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_dir(path: Path) -> None:
    path.mkdir()


def make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))  # the file stays after the socket is closed
    sock.close()


def make_device(path: Path) -> None:
    """A character device (/dev/null's numbers) where root may make one; else a symbolic link
    to /dev/zero, which the writers refuse as a link and the readers as a device."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        path.symlink_to("/dev/zero")


KINDS: dict[str, Callable[[Path], None]] = {
    "fifo": make_fifo,
    "directory": make_dir,
    "socket": make_socket,
    "device": make_device,
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_file_helpers_refuse_every_special_kind_at_once(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "f"
    KINDS[kind](path)
    started = time.monotonic()
    for mode in ("w", "a", "ab", "a+"):
        with pytest.raises((NotRegular, LinkRefused)):  # a link: refused as a link
            open_nofollow(path, mode)
    if kind != "device" or not path.is_symlink():
        with pytest.raises(NotRegular, match="not a regular file"):
            open_regular(path)
    if kind == "directory":
        with pytest.raises(NotRegular, match="is a directory"), replacing(path):
            pass
    assert time.monotonic() - started < 5  # nothing waited for a peer
    assert not [p for p in tmp_path.iterdir() if p.name != "f"]  # no temp file left behind


PLACES = ["metrics.jsonl", "train.log", "config.toml", "checkpoints", ".tuitrain.lock"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("place", PLACES)
def test_a_run_refuses_a_special_file_in_each_of_its_places(
    tmp_path: Path, place: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every (place, kind): `tuitrain --no-ui` (in this process: the refusals all come
    before training starts) returns 2 with one line that names the place, writes no
    metrics, and never waits on the file."""
    from tuitrain.cli import main

    failures = []
    for kind, make in KINDS.items():
        if place == "checkpoints" and kind == "directory":
            continue  # what it should be
        run_dir = tmp_path / kind
        run_dir.mkdir()
        make(run_dir / place)
        started = time.monotonic()
        code = main(["--no-ui", "--run-dir", str(run_dir), "--set", "train.max_steps=2"])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        if code != 2 or len(lines) != 1 or place not in lines[0]:
            failures.append(f"{place}/{kind}: exit {code}, stderr {err[-300:]!r}")
        metrics = run_dir / "metrics.jsonl"
        if place != "metrics.jsonl" and metrics.exists() and metrics.stat().st_size:
            failures.append(f"{place}/{kind}: wrote metrics before refusing")
        if time.monotonic() - started > 20:
            failures.append(f"{place}/{kind}: took {time.monotonic() - started:.0f} s")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_the_command_refuses_a_fifo_as_its_log_at_once(tmp_path: Path) -> None:
    """The real command line, a FIFO where train.log goes (it hung before): exit 2, one line."""
    os.mkfifo(tmp_path / "train.log")
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "train.log is a FIFO (named pipe), not a regular file" in proc.stderr
