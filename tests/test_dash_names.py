"""Runs whose names start with `-` (a run named `-h`, `--poll`): `tuitrain watch -- NAME`
and `--compare -- A B` take them as runs, and `tuitrain runs` opens watch that way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuitrain.commands.runs import list_runs, watch_args
from tuitrain.commands.watch import main as watch_main

HEADER = {"type": "header", "preset": "fashion-mini", "config": {},
          "time": "2026-12-01T10:00:00+00:00"}  # fmt: skip


def make(folder: Path, name: str) -> str:
    run = folder / name
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps(HEADER) + "\n")
    return name


@pytest.fixture
def dash_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    return [make(tmp_path, name) for name in ("-h", "--poll", "--compare")]


def reached_the_viewer(err: str) -> bool:
    """Under pytest there is no terminal: a target that was accepted stops there."""
    return "the viewer cannot draw here" in err and "usage" not in err


@pytest.mark.parametrize("name", ["-h", "--poll", "--compare"])
def test_watch_takes_a_name_after_double_dash_as_a_run(dash_runs, name: str, capsys) -> None:
    assert watch_main(["--", name]) == 2
    captured = capsys.readouterr()
    assert reached_the_viewer(captured.err) and not captured.out  # no --help printed


def test_compare_takes_names_after_double_dash_as_runs(dash_runs, capsys) -> None:
    assert watch_main(["--compare", "--", *dash_runs]) == 2
    assert reached_the_viewer(capsys.readouterr().err)
    assert watch_main(["--compare", "./-h", "--", dash_runs[1]]) == 2  # some before --
    assert reached_the_viewer(capsys.readouterr().err)


def test_two_runs_without_compare_are_one_sentence(dash_runs, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        watch_main(["--", *dash_runs[:2]])
    assert exc.value.code == 2
    assert "pass one run dir (or its metrics.jsonl), or --compare" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["watch", "compare"])
def test_runs_opens_watch_on_a_run_named_like_an_option(dash_runs, kind: str, capsys) -> None:
    """`tuitrain runs .` lists `-h` as run dir "-h": Enter (or c) hands it to watch after
    `--`, which opens it instead of printing watch's help."""
    rows = list_runs(Path("."))
    assert sorted(r.run_dir for r in rows) == sorted(dash_runs)
    paths = [rows[0].run_dir] if kind == "watch" else [r.run_dir for r in rows]
    assert watch_main(watch_args(kind, paths)) == 2
    captured = capsys.readouterr()
    assert reached_the_viewer(captured.err) and not captured.out
