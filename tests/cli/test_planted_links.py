"""A run dir in a shared place: links planted under the names a run writes are never written
through (issue 19, point 8). Each case plants a link to a victim file, runs one step, and
checks the victim is byte-identical afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "data.train_samples=256", "--set", "data.val_samples=256", "--max-steps", "1"]
PRECIOUS = b"precious: a file the run must never touch\n"

# names a run appends to or writes in place: a link there is refused
REFUSED = ["metrics.jsonl", "train.log", ".tuitrain.lock"]
# names only ever replaced (renamed over) or no longer used: the run goes on
REPLACED = [
    ".write-test",  # the writability probe now uses a fresh name of its own
    "config.toml.tmp",  # the config's temp file used to have this fixed name
    "config.toml",  # renamed over: the link goes, its target stays
]


def run(run_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUITRAIN_NO_DOWNLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", "--run-dir", str(run_dir), *TINY],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", REFUSED)
def test_a_link_where_a_run_appends_is_refused(tmp_path: Path, name: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(PRECIOUS)
    run_dir = tmp_path / "shared" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / name).symlink_to(victim)
    proc = run(run_dir)
    assert victim.read_bytes() == PRECIOUS
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{run_dir / name} is a symbolic link" in proc.stderr
    assert "tuitrain does not write through links" in proc.stderr
    assert (run_dir / name).is_symlink()  # left for the user to look at


@pytest.mark.slow
def test_links_under_replaced_names_are_never_written_through(tmp_path: Path) -> None:
    run_dir = tmp_path / "shared" / "run"
    run_dir.mkdir(parents=True)
    victims = {}
    for name in REPLACED:
        victims[name] = tmp_path / f"victim-{name.strip('.')}"
        victims[name].write_bytes(PRECIOUS)
        (run_dir / name).symlink_to(victims[name])
    proc = run(run_dir)
    assert proc.returncode == 0, proc.stderr
    assert all(v.read_bytes() == PRECIOUS for v in victims.values())
    assert (run_dir / "metrics.jsonl").is_file()
    assert (run_dir / "config.toml").is_file() and not (run_dir / "config.toml").is_symlink()


def test_a_link_in_place_of_a_checkpoint_temp_file_is_not_followed(tmp_path: Path) -> None:
    """The checkpoint's temp name is predictable (pid): a link there is unlinked, not
    written through; the checkpoint is saved."""
    from tuitrain.engine.checkpoint import load_checkpoint, save_checkpoint

    victim = tmp_path / "victim.txt"
    victim.write_bytes(PRECIOUS)
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / f".ckpt-step00000003.pt.tmp-{os.getpid()}").symlink_to(victim)
    path = save_checkpoint(tmp_path / "run", {"model": {}, "step": 3}, keep=2)
    assert victim.read_bytes() == PRECIOUS
    assert load_checkpoint(path)["step"] == 3
