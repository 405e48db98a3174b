"""The lines an interactive command ends with: what happened to the run, its files, and the
next commands, for completed, stopped and failed runs (and a failed script's output)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tuitrain.metrics.records import end_record, eval_record, header_record, train_record
from tuitrain.metrics.sinks import JsonlSink
from tuitrain.rundir.ending import ending_lines, traceback_site

TRAIN = dict(
    epoch=1.0, samples=2560, loss=0.5, lr=1e-3, samples_per_s=1000.0, step_time_s=0.25,
    data_wait_s=0.01, data_wait_frac=0.004, telemetry={}, grad_scale=None,
    skipped_steps=None, grad_norm=None,
)  # fmt: skip


def write_run(run_dir: Path, status: str, reason: str, checkpoint: bool = False, **end) -> Path:
    run_dir.mkdir(parents=True)
    sink = JsonlSink(run_dir / "metrics.jsonl")
    sink.write(header_record(preset="fashion-mini", time="2026-12-04T18:00:00+00:00"))
    sink.write(train_record(step=100, **TRAIN))  # type: ignore[arg-type]
    sink.write(eval_record(100, {"loss": 0.4, "acc": 0.8531}, epoch=1.0))
    sink.write(eval_record(200, {"loss": 0.5, "acc": 0.8402}, epoch=2.0))
    sink.write(end_record(status, reason, 200, elapsed_s=151.0, **end))
    sink.close()
    if checkpoint:
        (run_dir / "checkpoints").mkdir()
        (run_dir / "checkpoints" / "ckpt-step200.pt").write_bytes(b"x")
    return run_dir


def test_a_completed_run_says_what_happened_and_what_to_do_next(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs" / "a", "completed", "max_steps reached")
    lines = ending_lines(run)
    text = "\n".join(lines)
    assert lines[0] == "tuitrain: run completed (max_steps reached)"
    assert lines[1] == "  steps 200 · best val_acc 85.31% · took 2:31"  # best, not last
    assert f"files: {run} (metrics.jsonl)" in text
    assert f"tuitrain watch {run}" in text and f"tuitrain export {run} --format csv" in text
    assert "--resume" not in text  # nothing to continue
    assert f"tuitrain runs {run.parent}" in text  # no other run to compare with


def test_a_stopped_run_with_a_checkpoint_offers_resume_and_compare(tmp_path: Path) -> None:
    before = write_run(tmp_path / "runs" / "before", "completed", "done")
    run = write_run(tmp_path / "runs" / "it", "stopped", "stopped by SIGINT", checkpoint=True)
    text = "\n".join(ending_lines(run, prog="tuitrain watch"))
    assert text.startswith("tuitrain watch: run stopped (stopped by SIGINT)")
    assert "checkpoints/ (1)" in text
    assert f"tuitrain --resume auto --run-dir {run}" in text
    assert f"tuitrain watch --compare {before} {run}" in text


def test_a_failed_engine_run_offers_resume_only_with_a_checkpoint(tmp_path: Path) -> None:
    run = write_run(tmp_path / "x y", "failed", "the loss became NaN at step 120")
    lines = ending_lines(run)
    assert lines[0] == "tuitrain: run failed (the loss became NaN at step 120)"
    text = "\n".join(lines)
    assert "--resume" not in text and "last output" not in text
    assert f"tuitrain watch {shlex.quote(str(run))}" in text  # a path a shell takes whole


OUTPUT = """\
step 1 loss 2.3
Traceback (most recent call last):
  File "/home/me/train.py", line 42, in <module>
    main()
  File "/home/me/train.py", line 30, in main
    loss = model(x)
  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1736, in _call_impl
    return forward_call(*args, **kwargs)
ValueError: shapes do not match
"""


def test_a_failed_script_shows_its_last_output_and_where_its_traceback_points(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path / "s", "failed", "the script exited with code 1", exit_code=1)
    (run / "output.log").write_text("noise\n" * 50 + OUTPUT)
    lines = ending_lines(run, prog="tuitrain run")
    text = "\n".join(lines)
    assert lines[0] == "tuitrain run: run failed (the script exited with code 1)"
    assert "exit code 1" in lines[1]
    assert "    | ValueError: shapes do not match" in lines
    assert sum(line.startswith("    | ") for line in lines) == 10
    assert "traceback points at /home/me/train.py:30 (in main)" in text  # the script's frame
    assert "--resume" not in text  # a script's run is not resumed by tuitrain


def test_traceback_site_takes_the_last_traceback_and_falls_back_to_a_library() -> None:
    assert traceback_site(["all good"]) is None
    first = 'Traceback (most recent call last):\n  File "/a/old.py", line 1, in f\nE: x'
    only_lib = 'Traceback (most recent call last):\n  File "<frozen runpy>", line 88, in g'
    assert traceback_site(f"{first}\n{only_lib}".splitlines()) == "<frozen runpy>:88 (in g)"
    assert traceback_site(OUTPUT.splitlines()) == "/home/me/train.py:30 (in main)"


def test_no_run_is_one_line(tmp_path: Path) -> None:
    (lines,) = [ending_lines(tmp_path / "nothing")]
    assert len(lines) == 1 and "no run was written" in lines[0]


def test_a_comparison_ends_with_each_run_and_the_gate_between_them(tmp_path: Path) -> None:
    from tuitrain.rundir.ending import compare_lines

    a = write_run(tmp_path / "a", "completed", "done")
    b = write_run(tmp_path / "b", "failed", "the loss became NaN")
    lines = compare_lines([a, b, tmp_path / "none"])
    assert lines[1].startswith(f"  {a}") and "run completed (done) · steps 200" in lines[1]
    assert "run failed (the loss became NaN)" in lines[2] and lines[3].endswith("no run")
    assert f"tuitrain gate {a} {b}" in "\n".join(lines)


def test_compare_is_offered_with_the_newest_run_of_the_same_kind_only(tmp_path: Path) -> None:
    """A script's run or another preset's beside it is no comparison to offer."""
    import os

    same = write_run(tmp_path / "runs" / "same", "completed", "done")
    other = tmp_path / "runs" / "script"
    other.mkdir()
    sink = JsonlSink(other / "metrics.jsonl")
    sink.write(header_record(preset="wandb-style", task="script"))
    sink.close()
    run = write_run(tmp_path / "runs" / "it", "completed", "done")
    os.utime(same / "metrics.jsonl", (1, 1))  # the script's is the newest of the others
    text = "\n".join(ending_lines(run))
    assert f"tuitrain watch --compare {same} {run}" in text
    assert str(other) not in text
    lone = write_run(tmp_path / "solo" / "a", "completed", "done")
    (tmp_path / "solo" / "b").mkdir()
    (tmp_path / "solo" / "b" / "metrics.jsonl").write_text("not a header\n")
    assert "--compare" not in "\n".join(ending_lines(lone))


def test_next_commands_are_laid_out_for_the_terminals_width(tmp_path: Path) -> None:
    """At 80 and 100 columns no line wraps: a command too long for one line with its
    `# why` gets a line of its own, whole, and the reason comes on the next line."""
    write_run(tmp_path / "experiments" / "fashion" / "before", "completed", "done")
    run = write_run(
        tmp_path / "experiments" / "fashion" / "fashion-mini-20261204-180000",
        "stopped",
        "stopped by SIGINT",
        checkpoint=True,
    )
    wide = ending_lines(run)
    commands = [line.split("  # ")[0].strip() for line in wide[wide.index("  next:") + 1 :]]
    assert len(commands) == 4
    for width in (80, 100):
        lines = ending_lines(run, width=width)
        nexts = lines[lines.index("  next:") + 1 :]
        for command in commands:
            whole = [line for line in nexts if command in line]
            assert whole, f"{command!r} is not whole on a line at {width} columns"
            if len(command) + 4 <= width:
                assert len(whole[0]) <= width, whole[0]
        reasons = " ".join(line.strip() for line in nexts if line.strip().startswith("# "))
        assert "# continue from its last checkpoint" in reasons
        assert all(len(line) <= width for line in nexts if line.strip().startswith("# "))
    assert ending_lines(run, width=1000) == wide  # wide enough: the one table, as before


def test_a_preset_description_too_long_is_cut_at_a_word() -> None:
    from tuitrain.core.config import DESCRIPTION_CHARS, describe_presets
    from tuitrain.core.text import cut_at_word

    assert cut_at_word("one two three", 9) == "one two…"
    assert cut_at_word("one two three", 20) == "one two three"
    long = [desc for _, desc in describe_presets() if desc.endswith("…")]
    assert long, "no shipped preset has a description longer than the limit"
    for desc in long:
        assert len(desc) <= DESCRIPTION_CHARS
        assert not desc[-2].isspace()
    full = dict(describe_presets())["charlm-fast"]
    assert full.endswith("(nanoGPT's CPU recipe…"), full  # not "...recipe: 1.9"


def test_list_presets_wraps_descriptions_at_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuitrain.commands.train import list_presets

    monkeypatch.setenv("COLUMNS", "80")
    assert list_presets() == 0
    out = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in out), max(out, key=len)
    words = " ".join(out).split()
    assert "1.918" in words and "nats/char" in words  # whole words, none split
    monkeypatch.setenv("COLUMNS", "300")
    list_presets()
    assert any(len(line) > 100 for line in capsys.readouterr().out.splitlines())
