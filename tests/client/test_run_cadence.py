"""`tuitrain run --no-ui` prints a script's train records at a cadence (a line at most every
TRAIN_LINE_EVERY_S, the newest one before each eval, event and end), every eval, event and
end record, and keeps every record in the run's metrics file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.commands.run import TrainCadence


def train(step: int) -> dict:
    return {"type": "train", "step": step, "loss": 1.0 / (step + 1)}


def test_the_cadence_holds_train_lines_and_never_an_eval_or_the_last_before_it() -> None:
    pace = TrainCadence(every_s=3600.0)  # nothing is due twice within the test
    shown = [r["step"] for s in range(5) for r in pace.take(train(s))]
    assert shown == [0]  # the first, then held
    ev = {"type": "eval", "step": 4, "val_loss": 0.5}
    assert pace.take(ev) == [train(4), ev]  # the newest train record comes before it
    assert [r["step"] for s in range(5, 9) for r in pace.take(train(s))] == []
    assert pace.flush() == train(8)  # the end of the script: the last one
    assert pace.flush() is None


def test_a_zero_cadence_shows_every_train_record() -> None:
    pace = TrainCadence(every_s=0.0)
    assert [r["step"] for s in range(4) for r in pace.take(train(s))] == [0, 1, 2, 3]


@pytest.mark.slow
def test_run_no_ui_prints_few_train_lines_and_the_traceback_is_not_buried(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import tuitrain\n"
        "run = tuitrain.init(config={'lr': 0.1})\n"
        "for i in range(300):\n"
        "    tuitrain.log({'loss': 1.0 / (i + 1)})\n"
        "    if i == 149: tuitrain.log({'val/loss': 0.5})\n"
        "raise ValueError('boom at the end')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUITRAIN_")}
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "tuitrain", "run", "--no-ui", "--run-dir", str(run_dir), "--",
         sys.executable, str(script)],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    out = done.stdout.splitlines()
    steps = [line for line in out if "| loss " in line]
    assert 2 <= len(steps) <= 12, out  # the first, the one before the eval, the last ...
    assert any("step   300" in line or "step 300" in line for line in steps), steps
    assert any("val" in line and "0.5" in line for line in out), out
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["type"] == "train" for r in records) == 300  # every one kept in the file
    assert "ValueError: boom at the end" in done.stdout + done.stderr
