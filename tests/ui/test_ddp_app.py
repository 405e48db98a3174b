"""Rank 0's dashboard under DDP (gloo on CPU, two ranks): rank 0 is this process (the app and
its engine thread), rank 1 a real `python -m tuitrain` process, as torchrun would start it.

What must hold: the per-rank table shows both ranks; a preset switch from the UI rebuilds on
both ranks (a new run dir with rank 1's log in it); q stops both at the same step and rank 1
exits 0; a switch after the job's run has ended says why it cannot start.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.ui.conftest import TINY_UI
from tests.ui.pilot_tools import record_notifications, text_of, wait_for
from tuitrain.core.config import load_preset
from tuitrain.core.errors import EXIT_STOPPED
from tuitrain.engine import distributed as ddp
from tuitrain.host.run import RunHost
from tuitrain.metrics.store import MetricStore
from tuitrain.ui.app import TuitrainApp

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def two_ranks(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """torchrun's environment for a 2-rank job; this process is rank 0 (its process group
    initialised by the test), rank 1 is started by the test with the returned env."""
    common = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
    }
    for key, value in {**common, "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    yield {
        **os.environ,
        **common,
        "RANK": "1",
        "LOCAL_RANK": "1",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    ddp.destroy_process_group()


def start_rank1(env: dict[str, str], overrides: list[str]) -> subprocess.Popen:
    sets = [arg for o in overrides for arg in ("--set", o)]
    cmd = [sys.executable, "-m", "tuitrain", "--no-ui", *sets]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def end_of(log: Path) -> str:
    return [
        line for line in log.read_text().splitlines() if line.partition(" ")[2].startswith("end ")
    ][-1]


def rank0_app(overrides: list[str], run_dir: Path | None = None) -> TuitrainApp:
    """Rank 0 as `run_app` builds it under torchrun: its process group, then the app."""
    info = ddp.env_dist_info()
    ddp.init_process_group(info, 60, "cpu")
    cfg = load_preset("fashion-mini", overrides)
    host = RunHost(cfg, MetricStore(), run_dir=run_dir, dist=info)
    return TuitrainApp(host=host, overrides=overrides)


def both_ranks_reported(app: TuitrainApp) -> bool:
    return len((app.store.snapshot().latest or {}).get("rank_busy_s") or []) == 2


def throughput_text(app: TuitrainApp) -> str:
    return text_of(app.query_one("#throughput").query_one(".summary", Static))


@pytest.mark.slow
async def test_rank0_ui_switches_and_stops_both_ranks(
    two_ranks: dict[str, str], tmp_path: Path
) -> None:
    overrides = [*TINY_UI, "train.epochs=60", f'run.run_dir="{tmp_path / "first"}"']
    rank1 = start_rank1(two_ranks, overrides)
    try:
        app = rank0_app(overrides, tmp_path / "first")
        host = app.host
        assert host is not None
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(
                pilot,
                lambda: both_ranks_reported(app),
                timeout=90,
                what="a train record gathered from both ranks",
            )
            assert app.store.snapshot().header["world_size"] == 2
            await wait_for(pilot, lambda: "data+fwd" in throughput_text(app), what="the table")
            table = throughput_text(app)
            assert re.search(r"^\s+0\s", table, re.M) and re.search(r"^\s+1\s", table, re.M)

            # a preset switch from the UI: both ranks stop and rebuild with the new config
            app.switch_to("fashion-mini")
            await wait_for(pilot, lambda: app.host is not host, timeout=60, what="the new run")
            second = app.host
            assert second is not None and second.run_dir != host.run_dir
            await wait_for(
                pilot,
                lambda: second.run_dir is not None and (second.run_dir / "rank-1.log").exists(),
                timeout=60,
                what="rank 1 in the new run dir",
            )
            await wait_for(
                pilot,
                lambda: both_ranks_reported(app),
                timeout=90,
                what="the new run's first record from both ranks",
            )
            await pilot.press("q", "q")  # q asks first over a live run; q again stops
            await wait_for(pilot, lambda: not app.is_running, timeout=60, what="the exit")
        assert app.return_value == EXIT_STOPPED
        _, err = rank1.communicate(timeout=60)
        assert rank1.returncode == 0, err[-2000:]
    finally:
        if rank1.poll() is None:
            rank1.kill()
    # the first run stopped on both ranks at the same step, for the switch
    first_end = end_of(host.run_dir / "train.log")
    step = re.search(r"step (\d+)", first_end).group(1)
    assert "switching" in first_end
    assert f"step {step}" in end_of(host.run_dir / "rank-1.log")
    # the second run: rank 1 rebuilt (its own log, same final step as rank 0), then q
    second_end = json.loads((second.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert second_end["status"] == "stopped"
    assert f"step {second_end['step']} " in end_of(second.run_dir / "rank-1.log") + " "


@pytest.mark.slow
async def test_after_the_ddp_run_ends_a_switch_explains(
    two_ranks: dict[str, str], tmp_path: Path
) -> None:
    overrides = [*TINY_UI, "train.epochs=1", f'run.run_dir="{tmp_path / "run"}"']
    rank1 = start_rank1(two_ranks, overrides)
    try:
        app = rank0_app(overrides)
        host = app.host
        assert host is not None
        async with app.run_test(size=(120, 36)) as pilot:
            said = record_notifications(app)
            await wait_for(pilot, lambda: host.ended.is_set(), timeout=90, what="the run's end")
            _, err = rank1.communicate(timeout=60)  # told there is no next run: it exits
            assert rank1.returncode == 0, err[-2000:]
            app.switch_to("fashion-mini")
            await wait_for(pilot, lambda: any("other ranks exited" in m for m in said))
            assert app.host is host, "no new run was started without the other ranks"
            await pilot.press("q")
        assert app.return_value == 0
    finally:
        if rank1.poll() is None:
            rank1.kill()
