"""`tuitrain --resume` in a terminal gets the dashboard, as a fresh run does; headless with
--no-ui or without a terminal. The stop signals deferred while the checkpoint is read are
given back to their handlers before the dashboard starts."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tuitrain.commands import train
from tuitrain.core.config import load_preset
from tuitrain.host import stdio


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """train.main with the checkpoint read and the runs faked: where did the run go?"""
    seen: dict[str, Any] = {}
    cfg = load_preset("fashion-mini", [f'run.run_dir="{tmp_path / "run"}"'])
    state = {"step": 8}
    monkeypatch.setattr(train, "resume_config", lambda args, overrides: (cfg, state))

    def ui(cfg_: Any, overrides: list[str], resume: Any = None) -> int:
        seen.update(how="ui", resume=resume, sigint=signal.getsignal(signal.SIGINT))
        return 0

    def headless(cfg_: Any, resume: Any = None) -> int:
        seen.update(how="headless", resume=resume)
        return 0

    monkeypatch.setattr(train, "run_ui", ui)
    monkeypatch.setattr(train, "run_headless", headless)
    seen["state"] = state
    seen["ckpt"] = str(tmp_path / "run" / "checkpoints" / "ckpt-step00000008.pt")
    return seen


def test_resume_in_a_terminal_gets_the_dashboard(
    routed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "can_draw_ui", lambda **_: None)
    before = signal.getsignal(signal.SIGINT)
    try:
        assert train.main(["--resume", routed["ckpt"]]) == 0
    finally:
        signal.signal(signal.SIGINT, before)
    assert routed["how"] == "ui" and routed["resume"] is routed["state"]
    assert routed["sigint"] is before, "SIGINT is no longer only noted once the UI starts"


def test_resume_without_a_terminal_or_with_no_ui_is_headless(
    routed: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        monkeypatch.setattr(stdio, "can_draw_ui", lambda **_: None)
        assert train.main(["--no-ui", "--resume", routed["ckpt"]]) == 0
        assert routed["how"] == "headless" and routed["resume"] is routed["state"]
        monkeypatch.setattr(stdio, "can_draw_ui", lambda **_: "stdin is not a terminal")
        routed["how"] = None
        assert train.main(["--resume", routed["ckpt"]]) == 0
        assert routed["how"] == "headless"
        assert "running headless" in capsys.readouterr().err
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
