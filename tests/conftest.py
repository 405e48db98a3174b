"""Shared fixtures: tiny real runs on the shipped Fashion-MNIST subset, no thread leaks."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

# One OpenMP thread per process, set before torch is imported here or in any child (a child
# inherits it; torchrun gives its ranks the same): the tests' models are tiny, and two threads
# on a shared two-core machine spent twice the CPU for the same steps (tests/engine/
# test_trainer.py: 42 s of CPU against 19 s) and, with other work on the cores, twice the wall
# time. A value set outside the suite wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tuitrain.core.config import Config, load_preset  # noqa: E402 - after the thread count

# Under nohup (SIGHUP ignored) every child a test starts would inherit the ignore, and the
# tests that hang up on a run would see it carry on (tuitrain keeps a nohup's ignore, on
# purpose). An ignore survives exec, a handler does not: swap the ignore for a do-nothing
# handler, so pytest itself still outlives a hang-up and its children start with the default.
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda _signum, _frame: None)
# The same for Ctrl-C: pytest-xdist's workers (and a job a shell put in the background) ignore
# SIGINT, and a child Python that starts with it ignored never raises KeyboardInterrupt (the
# tests that press Ctrl-C on a child would see it carry on).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A real run small enough for a unit test: 512 training images, 256 for validation.
TINY = ["data.train_samples=512", "data.val_samples=256", "train.log_every=2"]


@pytest.fixture(autouse=True)
def _no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach for the network."""
    monkeypatch.setenv("TUITRAIN_NO_DOWNLOAD", "1")


@pytest.fixture
def tiny_config() -> Iterator[object]:
    def make(*overrides: str, preset: str = "fashion-mini") -> Config:
        return load_preset(preset, [*TINY, *overrides])

    yield make


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a non-daemon thread running (an engine that never ended)."""
    before = set(threading.enumerate())
    yield
    leaked = []
    for thread in set(threading.enumerate()) - before:
        if thread.daemon or thread.name.startswith("ThreadPoolExecutor"):
            continue  # torch.compile's worker pool lives for the process, by design
        thread.join(timeout=10)
        if thread.is_alive():
            leaked.append(thread.name)
    assert not leaked, f"threads left running after the test: {leaked}"


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 14 MiB filesystem (tmpfs): one checkpoint of the mini preset (~10 MB with AdamW's
    state) fits, the next one fills it midway. Mounting needs root, which CI has."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=14m", "tmpfs", str(mount)])
    assert done.returncode == 0, "mount -t tmpfs failed"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
