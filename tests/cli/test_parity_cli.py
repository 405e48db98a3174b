"""`tuitrain parity`: one JSON object with --json, a table without, exit codes 0/3/1/2/130.

The PASS setup (lr 3e-4, seed 4) is sized in tests/engine/test_parity.py: fp32 and bf16
disagree on 3 of the 1,000 test images there, so the gap cannot exceed 0.3 point.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tuitrain.commands.parity import format_table, main
from tuitrain.metrics.parity_report import EpochRow, PairedCounts, ParityResult

ROOT = Path(__file__).resolve().parents[2]
PASS_ARGS = ["--epochs", "1", "--mixed", "bf16", "--set", "optim.lr=3e-4", "--seed", "4"]
FRAGILE = ["--set", 'model.name="tests.engine.parity_fragile:make_model"']
OVERFLOW = ["--set", 'model.name="tests.engine.parity_fragile:make_overflow_model"']
SMALL = ["--set", "data.train_samples=1024", "--set", "data.val_samples=500"]
JSON_FIELDS = [
    "fp32_val_acc", "mixed_val_acc", "gap_points", "verdict", "speedup", "per_epoch",
    "test_set_size", "one_image_points", "epochs", "mixed", "fp32_samples_per_s",
    "mixed_samples_per_s", "early_max_rel_loss_diff", "early_steps", "status", "train_loss",
    "discordant", "p_value", "gap_ci95_points", "noise_note", "paired",
]  # fmt: skip


def one_json_object(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


@pytest.mark.slow
def test_json_pass_exits_0_and_writes_the_run_dir(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    code = main([*PASS_ARGS, "--json", "--early-steps", "3", "--run-dir", str(run_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = one_json_object(out)
    assert all(key in result for key in JSON_FIELDS)
    assert result["verdict"] == "PASS" and result["mixed"] == "bf16" and result["epochs"] == 1
    assert result["test_set_size"] == 1000 and result["one_image_points"] == pytest.approx(0.1)
    assert abs(result["gap_points"]) <= 0.5 and result["speedup"] > 0
    assert result["per_epoch"][0]["gap_points"] == result["gap_points"]
    # the noise: paired on the same 1,000 images, the gap inside its 95% interval
    only = result["discordant"]
    assert only["fp32_only"] - only["mixed_only"] == round(10 * result["gap_points"])
    assert 0 < result["p_value"] <= 1
    low, high = result["gap_ci95_points"]
    assert low <= result["gap_points"] <= high and high - low > 0.1
    assert result["run_dir"] == str(run_dir)
    assert json.loads((run_dir / "parity.json").read_text())["verdict"] == "PASS"
    assert (run_dir / "config.toml").is_file()
    log = (run_dir / "parity.log").read_text()
    assert "[fp32] step" in log and "[mixed] eval" in log and "[fp32 early]" in log
    assert "[parity] " in log and "PASS" in log
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r.get("run") in ("fp32", "mixed") or r.get("kind") == "parity" for r in records)
    assert "parity PASS" in err and "fp32 run: epoch 1" in err  # progress goes to stderr


@pytest.mark.slow
def test_a_real_fail_exits_3_with_a_readable_table(tmp_path: Path, capsys) -> None:
    argv = [*FRAGILE, *SMALL, "--set", "optim.warmup_steps=0", "--set", "optim.lr=1e-2"]
    argv += ["--epochs", "1", "--mixed", "fp16", "--early-steps", "0", "--run-dir", str(tmp_path)]
    code = main(argv)
    out, _ = capsys.readouterr()
    assert code == 3
    lines = out.splitlines()
    assert "fp32 vs fp16" in lines[0] and "gap (pt)" in lines[1]
    row = lines[2].split()
    assert row[0] == "1" and float(row[3]) > 20  # fp32 learned, fp16 stayed at chance
    assert "speedup" in out and "500 images: one image = 0.20 point" in out
    assert "early check" not in out  # --early-steps 0
    assert "a PASS allows a net 2 images" in out
    assert "FAIL: |gap|" in out
    noise = next(line for line in lines if line.startswith("noise "))
    assert "only fp32 right" in noise and "only fp16 right" in noise
    assert "exact McNemar p = < 0.0001" in noise and "gap 95% CI [+" in noise
    assert "within noise" not in out  # a gap of 20+ points on 500 images is no noise


def test_the_table_says_when_the_verdict_and_the_noise_disagree(tmp_path: Path) -> None:
    r = ParityResult(preset="p", mixed="bf16", device="cpu", epochs=1, seed=0)
    r.per_epoch = [EpochRow(1, 0.810, 0.804, 0.5, 0.5)]  # gap +0.6: FAIL
    r.test_set_size, r.paired = 1000, PairedCounts(800, 10, 4, 186)  # 10 vs 4: p = 0.18
    lines = format_table(r, tmp_path).splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("verdict "))
    assert "FAIL: |gap| 0.60 > 0.5" in lines[verdict]
    note = lines[verdict + 1].strip()
    assert note.startswith("FAIL, but within noise: the 95% interval of the gap [")
    assert "includes 0 (p = 0.18); settle it with more epochs" in note
    assert "data.val_samples=0" in note and "more seeds" in note
    noise = lines[verdict - 1]
    assert noise.startswith("noise        discordant images 10 only fp32 right / 4 only bf16")


def test_a_failed_run_exits_1_with_verdict_error(tmp_path: Path, capsys) -> None:
    code = main([*OVERFLOW, *SMALL, "--epochs", "1", "--mixed", "fp16", "--json",
                 "--early-steps", "2", "--run-dir", str(tmp_path)])  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 1
    result = one_json_object(out)
    assert result["verdict"] == "ERROR" and result["status"] == "failed"
    assert "fp16 run failed" in result["message"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--preset", "no-such-preset"], "unknown preset"),
        (["--mixed", "fp8"], "invalid choice"),
        (["--epochs", "0"], "--epochs 0"),
        (["--epochs", "three"], "invalid int"),
        (["--early-steps", "-1"], "--early-steps -1"),
        (["--set", "train.nope=1"], "train.nope"),
        (["--device", "cuda"], "CUDA is not available"),
    ],
)
def test_bad_input_exits_2_before_any_run(
    argv: list[str], says: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if "--device" in argv and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert main([*argv, "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and says in err
    assert not (tmp_path / "runs").exists()


def test_help_documents_the_exit_codes(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    flags = ["--preset", "--epochs", "--mixed", "--json", "--set", "--run-dir", "--data-dir"]
    flags += ["--device", "--seed", "--max-steps", "--early-steps"]
    assert all(flag in out for flag in flags)
    assert "0    PASS" in out and "3    FAIL" in out and "2    usage" in out


# --------------------------------------------------------------------------- subprocesses


def parity_process(*args: str) -> subprocess.Popen:
    """`python -m tuitrain parity ...`: the command line's own dispatch (tuitrain.cli.main) picks
    the command, as the console script does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUITRAIN_NO_DOWNLOAD": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "parity", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.slow
def test_sigint_cancels_with_130_and_no_verdict(tmp_path: Path) -> None:
    """Ctrl-C during the fp32 run, through the real dispatch: the command's own handler cancels
    the check (exit 130, one JSON object, status cancelled, no verdict), not the dispatcher's
    before-training one, and the mixed run never starts."""
    proc = parity_process(
        "--epochs", "1", "--mixed", "bf16", "--json", "--early-steps", "0", "--run-dir",
        str(tmp_path), "--set", "train.pace_s=0.2", "--set", "train.log_every=1",
    )  # fmt: skip
    log = tmp_path / "parity.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "[fp32] step" not in (
        log.read_text() if log.exists() else ""
    ):
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.1)
    assert "[fp32] step" in log.read_text(), "the fp32 run logged no step in 60 s"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    result = one_json_object(out)
    assert result["status"] == "cancelled" and result["verdict"] is None
    assert "cancelled by SIGINT" in result["message"]
    assert "before training started" not in err
    assert json.loads((tmp_path / "parity.json").read_text())["status"] == "cancelled"
    assert "[mixed] step" not in log.read_text()


def test_the_report_ends_with_the_next_commands_for_its_verdict() -> None:
    import argparse

    from tuitrain.commands.parity import next_lines

    args = argparse.Namespace(preset="fashion-mini", mixed="bf16")
    r = ParityResult(preset="p", mixed="bf16", device="cpu", epochs=1, seed=0)
    r.per_epoch = [EpochRow(1, 0.810, 0.804, 0.5, 0.5)]  # FAIL, within noise, no control
    r.test_set_size, r.paired = 1000, PairedCounts(800, 10, 4, 186)
    text = "\n".join(next_lines(r, args))
    assert "tuitrain parity --preset fashion-mini --mixed bf16 --epochs 2    # settle it" in text
    assert "--control on" in text and "the same check again" not in text
    r.per_epoch = [EpochRow(1, 0.810, 0.809, 0.5, 0.5)]  # PASS, nothing paired: no note
    r.paired = None
    assert next_lines(r, args)[1].endswith("# the same check again")


def test_parity_log_lines_say_when() -> None:
    import io
    import re

    from tuitrain.commands.parity import TaggedLineSink
    from tuitrain.metrics.records import event_record

    out = io.StringIO()
    sink = TaggedLineSink(out)
    sink.write({**event_record("fp32 run starts", kind="parity"), "run": "fp32"})
    sink.write(event_record("parity PASS", kind="parity"))
    first, second = out.getvalue().splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d \[fp32\] fp32 run starts", first)
    assert re.fullmatch(r"\d\d:\d\d:\d\d \[parity\] parity PASS", second)
