"""UI test fixtures: tiny paced real runs, a condition poller, and an engine-thread leak check."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.ui.pilot_tools import engine_threads

# Real runs on the shipped subset, small and paced so Pilot's idle waits stay short.
TINY_UI = [
    "data.train_samples=512",
    "data.val_samples=256",
    "data.batch_size=64",
    "data.eval_batch_size=256",
    "train.log_every=2",
    "train.pace_s=0.05",
    "train.device=cpu",
]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run `async def` tests in a fresh event loop (no asyncio plugin needed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True


@pytest.fixture(autouse=True)
def _no_engine_thread_left() -> Iterator[None]:
    """Fail a test that leaves an engine thread running (engine threads are daemons, so the
    repository-wide non-daemon check would not see them). A thread that is still finishing
    the step it was asked to stop after gets a grace period."""
    before = set(engine_threads())
    yield
    leaked = []
    for thread in set(engine_threads()) - before:
        thread.join(timeout=15)
        if thread.is_alive():
            leaked.append(thread.name)
    assert not leaked, f"engine threads left running after the test: {leaked}"


@pytest.fixture
def ui_overrides(tmp_path: Path) -> Callable[..., list[str]]:
    """Overrides for a tiny paced run writing under tmp_path (epochs sets its length)."""

    def make(*extra: str, epochs: int = 2) -> list[str]:
        run_dir = tmp_path / "first-run"
        return [*TINY_UI, f"train.epochs={epochs}", f'run.run_dir="{run_dir}"', *extra]

    return make
