"""A closed or broken stdout/stderr is no bad input of the run's: it trains, saves and exits
0 (issue 19, point 10: `tuitrain >&-` used to fail "looks like a bug", exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = "--no-ui --max-steps 2 --set data.train_samples=256 --set data.val_samples=128"


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """`command` in sh, with $TUITRAIN standing for this interpreter's `python -m tuitrain`."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TUITRAIN_NO_DOWNLOAD": "1",
        "TUITRAIN": f"{sys.executable} -m tuitrain",
    }
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def last_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(f"$TUITRAIN {TINY} --run-dir run >&-; echo rc=$? >&2", id="stdout-closed"),
        pytest.param(
            f"$TUITRAIN {TINY} --run-dir run 2>&- >/dev/null; echo rc=$? >&2", id="stderr-closed"
        ),
        pytest.param(  # the pipeline's status is head's: tuitrain's own is echoed
            f"{{ $TUITRAIN {TINY} --run-dir run; echo rc=$? >&2; }} | head -c1 >/dev/null",
            id="stdout-reader-leaves",
        ),
    ],
)
@pytest.mark.slow
def test_a_run_with_a_closed_or_broken_stream_completes(tmp_path: Path, command: str) -> None:
    proc = shell(command, tmp_path)
    assert "rc=0" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    end = last_record(tmp_path / "run")
    assert end["type"] == "end" and end["status"] == "completed"
    assert (tmp_path / "run" / "checkpoints" / "latest").is_file()


def test_list_presets_into_a_pipe_that_closes(tmp_path: Path) -> None:
    proc = shell("{ $TUITRAIN --list-presets; echo rc=$? >&2; } | head -c0", tmp_path)
    assert proc.stderr.strip() == "rc=0", proc.stderr
