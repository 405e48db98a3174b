"""RunHost: a real tiny run in its thread, its files, its notes, failures and run_app."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.ui.pilot_tools import engine_threads, wait_for
from tuitrain.core.config import load_preset
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.host.run import RunHost
from tuitrain.metrics.records import event_record
from tuitrain.metrics.sinks import SEQ_KEY
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.layout import parity_run_dir, sibling_run_dir
from tuitrain.ui import app as app_module

pytestmark = pytest.mark.timeout(120)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_host_runs_to_completion(ui_overrides: Callable[..., list[str]]) -> None:
    ended = threading.Event()
    store = MetricStore()
    cfg = load_preset("fashion-mini", ui_overrides("train.pace_s=0", epochs=1))
    note = event_record("switched preset a → b", kind="preset_switch")
    host = RunHost(cfg, store, notes=[note], on_end=lambda h: ended.set())
    host.start()
    assert ended.wait(60) and host.join(5)
    assert host.result is not None and host.result.status == "completed"
    assert host.run_dir is not None
    records = read(host.run_dir / "metrics.jsonl")
    assert [r["type"] for r in records[:2]] == ["header", "event"]
    assert records[1]["kind"] == "preset_switch", "notes follow the header"
    assert records[-1]["type"] == "end"
    assert all(SEQ_KEY not in r for r in records), "stamps stay in the store"
    assert (host.run_dir / "config.toml").is_file()
    assert "end   completed" in (host.run_dir / "train.log").read_text()
    snap = store.snapshot()
    assert snap.end is not None and all(SEQ_KEY in e for e in snap.events)


def test_unwritable_run_dir_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cfg = load_preset("fashion-mini", [f'run.run_dir="{blocker / "run"}"'])
    store = MetricStore()
    host = RunHost(cfg, store)
    host.start()
    assert host.join(30)
    assert host.result is not None and host.result.status == "failed"
    assert host.result.exit_code == 2
    snap = store.snapshot()
    assert snap.end is not None and snap.end["status"] == "failed"
    assert any(e.get("kind") == "failed" and "not writable" in e["message"] for e in snap.events)
    assert host.control.state == "failed"


def test_sibling_run_dir_is_fresh_and_made_by_the_call(tmp_path: Path) -> None:
    """Each call makes its own folder (mkdir, atomic): the same second's next switch, or a
    run that took the name first, never shares one."""
    first = sibling_run_dir(tmp_path / "old", "p")
    assert first is not None and first.parent == tmp_path and first.name.startswith("p-")
    assert first.is_dir() and not any(first.iterdir())
    second = sibling_run_dir(tmp_path / "old", "p")
    assert second is not None and second != first and second.is_dir()
    assert sibling_run_dir(None, "p") is None
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: sibling_run_dir(tmp_path / "old", "q"), range(8)))
    assert len(set(made)) == 8


def test_parity_checks_started_together_get_a_folder_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: parity_run_dir("fashion-mini"), range(4)))
    assert len(set(made)) == 4 and all(p.is_dir() for p in made)
    assert all(p.parent == Path("runs") and p.name.startswith("parity-fashion-mini-") for p in made)


def test_run_app_leaves_no_engine_thread(
    ui_overrides: Callable[..., list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_app end to end (headless): quit mid-run, then no engine thread is left."""
    real_run = app_module.TuitrainApp.run

    async def quit_after_a_few_steps(pilot) -> None:  # noqa: ANN001 - textual's Pilot
        app = pilot.app
        await wait_for(pilot, lambda: (app.store.snapshot().latest or {}).get("step", 0) >= 2)
        await pilot.press("q", "q")  # q asks first; q again stops and saves

    def headless_run(self: app_module.TuitrainApp) -> int | None:
        return real_run(self, headless=True, size=(120, 36), auto_pilot=quit_after_a_few_steps)

    monkeypatch.setattr(app_module.TuitrainApp, "run", headless_run)
    overrides = ui_overrides(epochs=40)
    ended = app_module.run_app(load_preset("fashion-mini", overrides), overrides)
    assert ended.code == EXIT_STOPPED  # stopped from the UI
    assert not engine_threads()


def another_run(run_dir: Path) -> str:
    """A finished run of another `tuitrain` in `run_dir` (its whole metrics file)."""
    from tuitrain.metrics.records import end_record, header_record

    run_dir.mkdir(parents=True)
    header = header_record(preset="fashion-mini", run_dir=str(run_dir))
    text = "".join(json.dumps(r) + "\n" for r in (header, end_record("completed", "done", 4)))
    (run_dir / "metrics.jsonl").write_text(text)
    return text


def test_the_dashboard_ends_with_the_run_dir_its_host_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs started in the same second in the same runs folder: the dashboard's run gets
    a folder of its own (never the other's), and its ending names that folder, however new
    the other run's files are (nothing guesses by the newest file)."""
    from tests.ui.conftest import TINY_UI
    from tuitrain.commands import train
    from tuitrain.rundir import layout

    monkeypatch.chdir(tmp_path)
    same_second = Path("runs") / "fashion-mini-20260101-120000"
    monkeypatch.setattr(layout, "default_run_dir", lambda cfg: same_second)
    theirs = another_run(same_second)
    real_run = app_module.TuitrainApp.run

    async def quit_while_the_other_writes(pilot) -> None:  # noqa: ANN001 - textual's Pilot
        app = pilot.app
        await wait_for(pilot, lambda: (app.store.snapshot().latest or {}).get("step", 0) >= 2)
        later = time.time() + 60  # the other run wrote after this one: newer by far
        os.utime(same_second / "metrics.jsonl", (later, later))
        await pilot.press("q", "q")

    def headless_run(self: app_module.TuitrainApp) -> int | None:
        return real_run(self, headless=True, size=(120, 36), auto_pilot=quit_while_the_other_writes)

    monkeypatch.setattr(app_module.TuitrainApp, "run", headless_run)
    overrides = [*TINY_UI, "train.epochs=40"]
    code = train.run_ui(load_preset("fashion-mini", overrides), overrides)
    assert code == EXIT_STOPPED
    assert (same_second / "metrics.jsonl").read_text() == theirs  # not a line of ours
    mine = same_second.with_name(same_second.name + "-2")
    header = read(mine / "metrics.jsonl")[0]
    assert Path(header["run_dir"]) == mine
    out, err = capsys.readouterr()
    assert f"tuitrain: run dir {mine}" in err
    (files,) = [line for line in out.splitlines() if line.strip().startswith("files:")]
    assert files.split()[1] == str(mine), out
