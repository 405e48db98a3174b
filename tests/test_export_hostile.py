"""Outputs never overwrite inputs, and export never blocks on a special file: `--out` naming
any file of the run being read (by path, through a link, as a hard link elsewhere, or the
run dir itself) is refused with the file intact; a FIFO, socket, device or directory where
the metrics file goes is refused at once; a failed export leaves no half-written file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_special_files import KINDS
from tests.ui.fake_records import records
from tuitrain.commands.export import main as export_main


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    lines = [json.dumps(r) for r in records("fp16", "cuda", 40)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "config.toml").write_text("[train]\nepochs = 1\n")
    (run / "train.log").write_text("log\n")
    (run / "checkpoints" / "ckpt-step00000010.pt").write_bytes(b"weights")
    return run


def contents(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


@pytest.mark.parametrize("fmt", ["csv", "tensorboard"])
@pytest.mark.parametrize(
    "target", ["metrics.jsonl", "config.toml", "train.log", "checkpoints/ckpt-step00000010.pt"]
)
def test_an_output_that_is_a_file_of_the_run_is_refused(
    run_dir: Path, target: str, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = contents(run_dir)
    code = export_main([str(run_dir), "--format", fmt, "--out", str(run_dir / target)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "file of the run being read" in err[0]
    assert contents(run_dir) == before


@pytest.mark.parametrize("how", ["symlink", "hardlink", "run_dir", "metrics_given"])
def test_links_and_the_run_dir_itself_are_refused(run_dir: Path, tmp_path: Path, how: str) -> None:
    before = contents(run_dir)
    out = tmp_path / "elsewhere.csv"
    source = str(run_dir)
    if how == "symlink":
        out.symlink_to(run_dir / "metrics.jsonl")
    elif how == "hardlink":
        os.link(run_dir / "train.log", out)
    elif how == "run_dir":
        out = run_dir
    else:  # the metrics file given, the out beside it
        source, out = str(run_dir / "metrics.jsonl"), run_dir / "config.toml"
    fmt = "tensorboard" if how == "run_dir" else "csv"
    assert export_main([source, "--format", fmt, "--out", str(out)]) == 2
    assert contents(run_dir) == before


def test_a_new_file_inside_the_run_dir_is_fine(run_dir: Path) -> None:
    assert export_main([str(run_dir), "--format", "csv", "--out", str(run_dir / "m.csv")]) == 0
    assert (run_dir / "m.csv").read_text().startswith("type,time,step,")


def test_a_failed_export_leaves_no_half_written_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("not json\n" * 10)
    out = tmp_path / "out.csv"
    assert export_main([str(run), "--format", "csv", "--out", str(out)]) == 2
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temp file either


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("given", ["run_dir", "file"])
def test_a_special_metrics_file_is_refused_at_once(
    tmp_path: Path, kind: str, given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    KINDS[kind](run / "metrics.jsonl")
    source = run if given == "run_dir" else run / "metrics.jsonl"
    if kind == "directory" and given == "file":
        source = run / "metrics.jsonl"  # a directory given: it has no metrics.jsonl inside
    code = export_main([str(source), "--format", "csv", "--out", str(tmp_path / "o.csv")])
    assert code == 2
    err = capsys.readouterr().err
    assert ("not a regular file" in err) or ("no metrics.jsonl" in err), err
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_an_export_at_once_and_leaves_no_file(tmp_path: Path, sig: int) -> None:
    run = tmp_path / "run"
    run.mkdir()
    line = json.dumps(records("fp16", "cuda", 4)[1]) + "\n"
    with open(run / "metrics.jsonl", "w") as f:
        f.write(json.dumps(records("fp16", "cuda", 4)[0]) + "\n")
        f.write(line * 400_000)  # ~300 MB: seconds of exporting
    out = tmp_path / "out.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "export", str(run), "--format", "csv",
         "--out", str(out)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".out.csv.tmp") for p in tmp_path.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, "the export never started"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=10)  # ends within seconds
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert "Traceback" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no CSV, no temp file
