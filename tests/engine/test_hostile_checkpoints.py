"""Nothing blocks on a special file where a resume reads: a FIFO, socket, device or directory
as `checkpoints/latest`, as the newest checkpoint or as `--resume PATH` is refused in one
sentence, or passed over with a note where `--resume auto` has an older complete one."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.cli.test_special_files import KINDS
from tuitrain.engine.checkpoint import (
    CheckpointError,
    find_latest,
    load_checkpoint,
    save_checkpoint,
)

pytestmark = pytest.mark.timeout(60)


def two_checkpoints(run_dir: Path) -> tuple[Path, Path]:
    older = save_checkpoint(run_dir, {"model": {"w": torch.ones(4)}, "step": 2}, keep=5)
    newer = save_checkpoint(run_dir, {"model": {"w": torch.ones(4)}, "step": 4}, keep=5)
    return older, newer


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_latest_file_is_passed_over(tmp_path: Path, kind: str) -> None:
    _, newer = two_checkpoints(tmp_path)
    latest = tmp_path / "checkpoints" / "latest"
    latest.unlink()
    KINDS[kind](latest)
    started = time.monotonic()
    assert find_latest(tmp_path) == newer  # the newest by step that loads
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_newest_checkpoint_falls_back_to_the_older_one(tmp_path: Path, kind: str) -> None:
    older, newer = two_checkpoints(tmp_path)
    newer.unlink()
    KINDS[kind](newer)
    skipped: list[str] = []
    assert find_latest(tmp_path, skipped) == older
    assert len(skipped) == 1 and newer.name in skipped[0]
    assert "not a regular file" in skipped[0] or "is a folder" in skipped[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_given_as_the_checkpoint_is_one_sentence(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "ckpt-step00000004.pt"
    KINDS[kind](path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "not a regular file" in message or "is a folder" in message


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        random.Random(3000).randbytes(3000),
        b"PK\x03\x04broken zip",
    ],  # fixed: xdist's workers collect alike
    ids=["empty", "random-bytes", "broken-zip"],
)
def test_garbage_is_not_said_to_run_code(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "ckpt-step00000004.pt"
    path.write_bytes(garbage)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert "could run code" not in str(info.value)


@pytest.mark.slow
def test_resume_from_a_fifo_ends_at_once_with_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "ckpt-step00000004.pt"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--resume", str(fifo), "--run-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "FIFO" in lines[0] and "not a regular file" in lines[0]
