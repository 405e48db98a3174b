"""The event log's first line names what started where, and nothing it does not know."""

from __future__ import annotations

from tuitrain.ui.widgets.events import started_line


def test_a_script_that_never_called_init_has_no_device_or_run_dir_to_name() -> None:
    header = {"type": "header", "preset": "train", "client": True, "config": {}}
    assert started_line(header) == "run started: train (a script)"


def test_a_script_and_an_engine_run_name_their_device_and_run_dir() -> None:
    script = {"type": "header", "preset": "train", "client": True, "device": "cuda:0",
              "run_dir": "runs/train-1"}  # fmt: skip
    assert started_line(script) == "run started: train (a script) on cuda:0, run dir runs/train-1"
    engine = {"type": "header", "preset": "fashion-bf16", "device": "cpu", "precision": "bf16",
              "compile": False, "global_batch": 256, "run_dir": "runs/f"}  # fmt: skip
    line = started_line(engine)
    assert line.startswith("run started: preset fashion-bf16 on cpu (") and "bf16" in line
    assert line.endswith(", run dir runs/f")
