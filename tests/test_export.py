"""`tuitrain export`: CSV through pandas, TensorBoard through its own EventAccumulator, the live
TensorBoard sink, and bad input in one sentence with exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tuitrain.commands.export import main
from tuitrain.core.config import load_preset
from tuitrain.host.run import RunHost

TINY = [
    "data.train_samples=512",
    "data.val_samples=256",
    "train.log_every=2",
    "train.epochs=2",
    "run.tensorboard=true",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("export") / "run"
    result = RunHost(load_preset("fashion-mini", TINY), run_dir=folder).run()
    assert result.status == "completed"
    return folder


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def scalars(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc


def test_csv_round_trips_through_pandas(run_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run.csv"
    assert main([str(run_dir), "--format", "csv", "--out", str(out)]) == 0
    train, evals = records(run_dir, "train"), records(run_dir, "eval")
    frame = pd.read_csv(out)
    assert len(frame) == len(train) + len(evals) and {"step", "loss", "val_acc"} <= set(frame)
    rows = frame[frame["type"] == "train"]
    assert list(rows["step"]) == [r["step"] for r in train]
    assert list(rows["loss"]) == pytest.approx([r["loss"] for r in train])
    evaluated = frame[frame["type"] == "eval"]
    assert list(evaluated["val_acc"]) == pytest.approx([r["val_acc"] for r in evals])
    assert evaluated["loss"].isna().all()  # a train field on an eval row is empty
    assert "rows written to" in capsys.readouterr().err
    # the README's recipe for the JSONL itself
    direct = pd.read_json(run_dir / "metrics.jsonl", lines=True)
    assert len(direct[direct["type"] == "train"]) == len(train)


def test_tensorboard_export_and_the_live_sink_agree(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "tb"
    assert main([str(run_dir / "metrics.jsonl"), "--format", "tensorboard", "--out", str(out)]) == 0
    train, evals = records(run_dir, "train"), records(run_dir, "eval")
    for folder in (out, run_dir / "tensorboard"):  # exported afterwards, written live
        acc = scalars(folder)
        loss = acc.Scalars("train/loss")
        assert [e.step for e in loss] == [r["step"] for r in train]
        assert [e.value for e in loss] == pytest.approx([r["loss"] for r in train], rel=1e-6)
        assert [e.value for e in acc.Scalars("val/acc")] == pytest.approx(
            [r["val_acc"] for r in evals], rel=1e-6
        )
        tags = set(acc.Tags()["scalars"])
        assert {"optim/lr", "perf/samples_per_s", "perf/data_wait_frac"} <= tags
        assert "memory/host_rss_bytes" in tags and "amp/grad_scale" not in tags  # fp32: null


def test_a_half_written_last_line_exports_the_complete_records(
    run_dir: Path, tmp_path: Path, capsys
) -> None:
    cut = tmp_path / "metrics.jsonl"
    text = (run_dir / "metrics.jsonl").read_text()
    cut.write_text(text + '{"type": "train", "step": 99, "lo')
    out = tmp_path / "cut.csv"
    assert main([str(cut), "--format", "csv", "--out", str(out)]) == 0
    assert 99 not in list(pd.read_csv(out)["step"])
    assert "half-written" in capsys.readouterr().err


def junk(folder: Path) -> Path:
    (folder / "junk.jsonl").write_text("hello\nworld\n")
    return folder / "junk.jsonl"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p, "is not a run dir"),
        (junk, "no tuitrain record"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path: Path, capsys, make, says) -> None:
    target = make(tmp_path)
    assert main([str(target), "--format", "csv", "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "Traceback" not in err[0], err


def test_without_tensorboard_the_extra_is_named(
    run_dir: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    code = main([str(run_dir), "--format", "tensorboard", "--out", str(tmp_path / "tb")])
    assert code == 2
    err = capsys.readouterr().err
    assert "tuitrain[tensorboard]" in err and err.count("\n") == 1


@pytest.mark.parametrize("out", [["--out", "-"], []])
def test_csv_to_standard_output(run_dir: Path, tmp_path: Path, capsys, out: list[str]) -> None:
    """`--out -` and no --out: the same CSV as the file, on stdout; the note on stderr."""
    import io

    assert main([str(run_dir), "--format", "csv", "--out", str(tmp_path / "f.csv")]) == 0
    capsys.readouterr()
    from tuitrain.cli import main as cli_main  # the command line's own entry, in-process

    assert cli_main(["export", str(run_dir), "--format", "csv", *out]) == 0
    captured = capsys.readouterr()
    assert captured.out == (tmp_path / "f.csv").read_text()
    frame = pd.read_csv(io.StringIO(captured.out))
    assert len(frame) == len(records(run_dir, "train")) + len(records(run_dir, "eval"))
    assert frame["time"].notna().all()  # every row says when
    assert "rows written to standard output" in captured.err
    assert not (Path.cwd() / "-").exists()


def test_tensorboard_to_standard_output_is_refused(run_dir: Path, capsys) -> None:
    assert main([str(run_dir), "--format", "tensorboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out FOLDER" in err
