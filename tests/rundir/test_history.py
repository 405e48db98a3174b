"""A run is its whole history: a resumed run (`tuitrain --resume`) appends a header and its
records to the run's file, and every reader reports every segment (`tuitrain runs`, the
ending, `watch --compare`, the gate, the `--resume` dashboard); a script's own evaluation
metrics (`val/acc` ...) count as its evaluation.

The engine tests share one real resumed run (two segments: steps 1-4, then 5-8); the others
write their files with the real writers (the client, JsonlSink and the contract's builders)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import tuitrain
from tests.conftest import TINY
from tests.ui.fake_records import header as engine_header
from tests.ui.fake_records import train as engine_train
from tests.ui.pilot_tools import text_of, wait_for
from tuitrain.client.core import SCRIPT_TASK
from tuitrain.commands.gate import main as gate_main
from tuitrain.commands.runs import list_runs, read_row
from tuitrain.metrics.format import format_duration
from tuitrain.metrics.records import (
    end_record,
    eval_record,
    header_record,
    history_of,
    task_declaration,
)
from tuitrain.metrics.sinks import JsonlSink
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.ending import compare_lines, ending_lines
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.rundir.lock import RunDirLock
from tuitrain.rundir.summary import earlier_segments, judged_metric, summarize_run


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class RecordingStore(MetricStore):
    """A store that remembers each header pushed into it, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[Mapping[str, Any]] = []

    def push(self, record: Mapping[str, Any]) -> None:
        if record.get("type") == "header":
            self.headers.append(record)
        super().push(record)


# --------------------------------------------------------------------------- a real resumed run


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fashion-mini run to step 4, resumed to step 8 in the same run dir the way the
    `--resume` dashboard runs it (RunHost with a store)."""
    from tuitrain.core.config import load_preset
    from tuitrain.engine.checkpoint import find_latest, load_checkpoint
    from tuitrain.host.run import RunHost

    os.environ.setdefault("TUITRAIN_NO_DOWNLOAD", "1")
    run = tmp_path_factory.mktemp("history") / "run"
    where = f'run.run_dir="{run}"'
    first = RunHost(load_preset("fashion-mini", [*TINY, "train.max_steps=4", where]), run_dir=run)
    assert first.run().status == "completed"
    state = load_checkpoint(find_latest(run))
    store = RecordingStore()
    cfg = load_preset("fashion-mini", [*TINY, "train.max_steps=8", where])
    second = RunHost(cfg, store, run_dir=run, resume=state)
    assert second.run().status == "completed"
    recs = records_of(run / "metrics.jsonl")
    return {"run": run, "store": store, "records": recs}


@pytest.mark.slow
def test_a_resumed_runs_row_ending_and_gate_cover_both_segments(
    resumed: dict[str, Any], capsys: pytest.CaptureFixture
) -> None:
    run, recs = resumed["run"], resumed["records"]
    headers = [r for r in recs if r["type"] == "header"]
    ends = [r for r in recs if r["type"] == "end"]
    assert len(headers) == len(ends) == 2 and headers[0].get("history") is None
    took = sum(e["elapsed_s"] for e in ends)
    primary = task_declaration(headers[0])["primary"]
    best = max(r[primary] for r in recs if r["type"] == "eval")

    row = read_row(run)
    assert row is not None and list_runs(run.parent)[0] == row
    assert row.status == "completed" and row.steps == 8
    assert row.duration_s == pytest.approx(took, abs=0.01)  # both segments, not the last
    assert row.started == headers[0]["time"]  # the first segment's start
    assert row.best == best and row.best_metric == primary and row.segments == 2

    text = "\n".join(ending_lines(run))
    assert f"took {format_duration(took)} (resumed once)" in text, text
    assert f"best {primary} " in text and "steps 8 " in text

    assert gate_main([str(run), str(run), "--json", "--warmup", "0"]) == 1  # too few points
    result = json.loads(capsys.readouterr().out)
    figures = result["runs"]["candidate"]
    assert figures["segments"] == 2 and figures["duration_s"] == pytest.approx(took, abs=0.01)
    assert figures["best"] == best and figures["steps"] == 8
    throughput, metric, ending = result["checks"]
    points = sum(1 for r in recs if r["type"] == "train" and r.get("samples_per_s"))
    assert f"has {points} log point(s)" in throughput["why"]  # both segments' log points
    assert metric["verdict"] == "pass" and ending["verdict"] == "pass"


@pytest.mark.slow
def test_the_resumed_dashboard_holds_the_first_segment(resumed: dict[str, Any]) -> None:
    store, recs = resumed["store"], resumed["records"]
    resume_at = [i for i, r in enumerate(recs) if r["type"] == "header"][1]
    first = [float(r["step"]) for r in recs[:resume_at] if r["type"] == "train"]
    # the first segment was replayed into the store before the resumed engine wrote
    snap = store.snapshot()
    loss = snap.get("loss").xs
    assert first and loss[: len(first)] == tuple(first) and loss[-1] == 8.0
    assert len(snap.evals) == sum(1 for r in recs if r["type"] == "eval")
    assert [h.get("history") is None for h in store.headers] == [True, False]
    assert snap.header is not None and history_of(snap.header)["segments"] == 1


@pytest.mark.slow
def test_compare_over_a_resumed_run_shows_it_from_its_first_step(resumed: dict[str, Any]) -> None:
    from tuitrain.ui.compare import COLORS, NAMES, CompareApp, Source

    run, recs = resumed["run"], resumed["records"]
    path = run / "metrics.jsonl"
    sources = [Source(n, path, MetricStore(), c) for n, c in zip(NAMES[:2], COLORS, strict=False)]
    for source in sources:
        JsonlFollower(source.path, source.store).poll()
    app = CompareApp(sources)

    async def look() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            app.poll_all()
            await wait_for(pilot, lambda: app.charts[0]._data, what="the loss chart drawn")
            assert app.charts[0]._data[1].xs[0] == 2.0  # the first segment's first log point
            table = text_of(app.table).splitlines()
            row = next(line for line in table if line.startswith("■ A"))
            assert "completed" in row and f"{8:>10}" in row

    asyncio.run(look())
    took = sum(r["elapsed_s"] for r in recs if r["type"] == "end")
    said = "\n".join(compare_lines([run, run]))
    assert f"took {format_duration(took)} (resumed once)" in said, said


# --------------------------------------------------------------------------- the real writers


def write_segment(
    sink: JsonlSink,
    steps: range,
    accs: Mapping[int, float],
    *,
    at: str,
    history: dict[str, Any] | None = None,
) -> None:
    """An engine-like segment through JsonlSink: a header (`history`: what the engine writes
    when it resumes), a train record per step, an eval at each step of `accs`."""
    sink.write({**engine_header("fp32", "cpu"), "time": at, "history": history})
    for step in steps:
        sink.write({**engine_train(step, "fp32", False), "time": at})
        if step in accs:
            sink.write({**eval_record(step, {"loss": 0.5, "acc": accs[step]}), "time": at})


def test_an_earlier_segments_best_and_a_crashed_last_segment(tmp_path: Path, capsys) -> None:
    """The best evaluation lies in the first segment, far before the tail; the resumed
    segment died without an end record: the run crashed, its best is the first segment's,
    its duration both segments', and the gate says it did not end."""
    run = tmp_path / "run"
    path = run / "metrics.jsonl"
    sink = JsonlSink(path)
    write_segment(sink, range(2, 402, 2), {200: 0.84, 400: 0.87}, at="2026-01-01T00:00:00+00:00")
    sink.write(end_record("stopped", "SIGTERM", 400, elapsed_s=100.0))
    history = earlier_segments(path)  # what the engine writes when it resumes
    assert history is not None
    assert (history["segments"], history["elapsed_s"], history["step"]) == (1, 100.0, 400)
    assert history["best"] == {"val_loss": 0.5, "val_acc": 0.87}
    resumed_at = "2026-01-02T00:00:00+00:00"
    write_segment(sink, range(402, 1002, 2), {600: 0.5}, at=resumed_at, history=history)
    sink.close()
    RunDirLock(run).release()  # its writer took the lock, then died
    then = 1767312000.0 + 50  # 50 s after the resumed header's time
    os.utime(path, (then, then))

    row = summarize_run(run)
    assert row is not None
    assert (row.status, row.steps, row.segments) == ("crashed", 1000, 2)
    assert row.best == 0.87 and row.best_metric == "val_acc"
    assert row.duration_s == pytest.approx(150.0)
    assert row.started == "2026-01-01T00:00:00+00:00"
    assert "took 2:30 (resumed once)" in "\n".join(ending_lines(run))

    assert gate_main([str(run), str(run), "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert "no end record (it crashed" in checks[2]["why"]  # not the first segment's "stopped"


def test_a_third_segment_chains_the_history(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    write_segment(sink, range(2, 12, 2), {10: 0.6}, at="2026-01-01T00:00:00+00:00")
    sink.write(end_record("stopped", "x", 10, elapsed_s=30.0))
    write_segment(sink, range(12, 22, 2), {20: 0.9}, at="2026-01-01T01:00:00+00:00",
                  history=earlier_segments(path))  # fmt: skip
    sink.write(end_record("stopped", "x", 20, elapsed_s=12.5))
    history = earlier_segments(path)
    write_segment(sink, range(22, 32, 2), {30: 0.7}, at="2026-01-01T02:00:00+00:00",
                  history=history)  # fmt: skip
    sink.write(end_record("completed", "done", 30, elapsed_s=5.0))
    sink.close()
    assert history is not None
    assert (history["segments"], history["elapsed_s"], history["step"]) == (2, 42.5, 20)
    assert history["started"] == "2026-01-01T00:00:00+00:00"
    assert history["best"]["val_acc"] == 0.9 and history["best"]["val_loss"] == 0.5
    row = summarize_run(path.parent)
    assert row is not None
    assert (row.segments, row.duration_s, row.best, row.steps) == (3, 47.5, 0.9, 30)


def test_a_fresh_run_appended_to_a_used_run_dir_is_a_run_of_its_own(tmp_path: Path) -> None:
    """A header without history starts a run (a fresh run in an old run dir): the earlier
    run's evaluations, duration and start are not its."""
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    write_segment(sink, range(2, 12, 2), {10: 0.9}, at="2026-01-01T00:00:00+00:00")
    sink.write(end_record("completed", "done", 10, elapsed_s=30.0))
    write_segment(sink, range(2, 8, 2), {6: 0.4}, at="2026-01-05T00:00:00+00:00")
    sink.write(end_record("completed", "done", 6, elapsed_s=7.0))
    sink.close()
    row = summarize_run(path.parent)
    assert row is not None
    assert (row.duration_s, row.best, row.steps) == (7.0, 0.4, 6)
    assert row.started == "2026-01-05T00:00:00+00:00" and row.segments == 1


def test_a_hostile_history_reads_as_what_it_can() -> None:
    assert history_of(header_record(preset="p")) is None
    assert history_of({"type": "header", "history": [1, 2]}) is None
    best = {"val_acc": "high", "val_loss": 0.4, "loss": 0.1, "val_x": float("inf")}
    history = {"segments": -3, "elapsed_s": float("nan"), "started": 5, "step": 2**70}
    got = history_of({"type": "header", "history": {**history, "best": best}})
    assert got == {"segments": 1, "elapsed_s": 0.0, "started": None, "step": None,
                   "best": {"val_loss": 0.4}}  # fmt: skip


# --------------------------------------------------------------------------- a script's evals


def script_run(path: Path, accs: list[float], *, wandb: bool = False) -> Path:
    """A script that logs its loss every step and `val/acc` (and `val/loss`) now and then,
    through tuitrain.init/log or the wandb drop-in."""
    if wandb:
        import tuitrain.wandb as drop_in

        drop_in.init(name=path.name, dir=str(path.parent))
        assert drop_in.run is not None
        run_dir, log, finish = Path(drop_in.run.dir), drop_in.log, drop_in.finish
    else:
        run = tuitrain.init(path, name=path.name)
        run_dir, log, finish = path, run.log, run.finish
    for i, acc in enumerate(accs):
        for _ in range(5):
            log({"loss": 1.0 / (i + 1)})
        log({"val/loss": 0.4 + i / 100, "val/acc": acc})
    finish()
    return run_dir


def test_a_scripts_val_acc_is_its_evaluation(tmp_path: Path, capsys) -> None:
    good = script_run(tmp_path / "runs" / "good", [0.70, 0.80, 0.75])
    worse = script_run(tmp_path / "runs" / "worse", [0.55, 0.60, 0.58], wandb=True)
    evals = [r for r in records_of(good / "metrics.jsonl") if r["type"] == "eval"]
    assert list(evals[0]) == ["type", "time", "step", "val_loss", "val_acc"]  # the client's

    rows = {r.name: r for r in list_runs(tmp_path / "runs")}
    assert (rows["good"].best_metric, rows["good"].best, rows["good"].best_mode) == (
        "val_acc", 0.80, "max")  # fmt: skip
    assert rows[worse.name].best == 0.60
    assert main_json(tmp_path / "runs", capsys)[0]["best_metric"] == "val_acc"
    text = "\n".join(ending_lines(good))
    assert "best val_acc 0.8000 " in text and "no evaluation" not in text

    assert gate_main([str(good), str(worse), "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)["checks"]
    quality = next(c for c in checks if c["what"].startswith("val_acc (max, last evaluation)"))
    assert (quality["baseline"], quality["candidate"]) == (0.75, 0.58)
    assert quality["verdict"] == "FAIL" and quality["change"] == "worse by 0.17"
    assert gate_main([str(good), str(good), "--json"]) == 1  # no samples/s: throughput fails
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert next(c for c in checks if c["what"].startswith("val_acc"))["verdict"] == "pass"


def main_json(folder: Path, capsys: pytest.CaptureFixture) -> list[dict[str, Any]]:
    from tuitrain.commands.runs import main

    capsys.readouterr()
    assert main([str(folder), "--json"]) == 0
    return sorted(json.loads(capsys.readouterr().out), key=lambda r: r["name"])


@pytest.mark.parametrize(
    ("task", "logged", "judged"),
    [
        (None, ["val_loss", "val_acc"], ("val_acc", "max", "float")),
        (None, ["val_loss"], ("val_loss", "min", "float")),
        (None, ["val_loss", "val_word_error_rate"], ("val_word_error_rate", "min", "float")),
        (None, [], None),
        ({"name": "t", "primary": "val_mae", "mode": "min",
          "metrics": [{"name": "val_mae", "goal": "min", "format": "float"}]},
         ["val_loss", "val_r2"], ("val_mae", "min", "float")),
        ({"name": "t", "primary": None, "metrics": [
            {"name": "val_f1", "goal": "max", "format": "pct", "split": "val"}]},
         ["val_loss", "val_f1"], ("val_f1", "max", "pct")),
    ],
)  # fmt: skip
def test_the_metric_a_run_is_judged_by(
    task: dict[str, Any] | None, logged: list[str], judged: tuple[str, str, str] | None
) -> None:
    header = header_record(preset="p", task=task or SCRIPT_TASK)
    got = judged_metric(header, logged)
    assert (None if got is None else (got.name, got.mode, got.format)) == judged
