"""Alerts (issue 16): each rule on crafted records, once per episode; the actions on a real
Control; the on_alert command with the alert as JSON; a stall; a diverging real run whose
alert reaches an --on-alert script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tuitrain.core.config import load_preset
from tuitrain.core.control import Control
from tuitrain.engine.diagnostics import Diagnostics, StallWatch
from tuitrain.metrics.alerts import QUIET, AlertRules

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = load_preset("fashion-mini").to_dict()["alerts"]


def train(step: int, **fields: Any) -> dict[str, Any]:
    base = {"type": "train", "step": step, "loss": 1.0, "samples_per_s": 1000.0,
            "data_wait_frac": 0.01, "grad_scale": None, "skipped_steps": None,
            "mem_peak_bytes": None}  # fmt: skip
    return {**base, **fields}


def fired(rules: AlertRules, records: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(index of the record, alert name) for every alert the records raise."""
    return [(i, a.name) for i, rec in enumerate(records) for a in rules.judge(rec)]


def test_loss_spike_fires_once_per_episode() -> None:
    losses = [1.0, 0.9, 0.8, 0.8, 0.7, 5.0, 6.0, 0.7, 0.7, 0.7, 0.7, 4.0]
    got = fired(AlertRules(DEFAULTS), [train(i, loss=v) for i, v in enumerate(losses)])
    assert got == [(5, "loss_spike"), (11, "loss_spike")]  # 6.0 is the same episode


def test_a_loss_below_the_factor_is_no_spike() -> None:
    losses = [1.0, 1.0, 1.0, 1.0, 1.0, 2.9]  # the factor is 3x the median
    assert fired(AlertRules(DEFAULTS), [train(i, loss=v) for i, v in enumerate(losses)]) == []


def test_scale_collapse() -> None:
    records = [train(1, grad_scale=65536.0), train(2, grad_scale=0.5, skipped_steps=30)]
    rules = AlertRules(DEFAULTS)
    assert fired(rules, records) == [(1, "scale_collapse")]


def test_throughput_drop_after_the_warmup() -> None:
    rates = [100.0, 900.0] + [1000.0] * 8 + [400.0]  # slow first points are not the norm
    got = fired(AlertRules(DEFAULTS), [train(i, samples_per_s=r) for i, r in enumerate(rates)])
    assert got == [(10, "throughput_drop")]


def test_memory_creep_needs_a_rising_peak_for_n_intervals() -> None:
    cfg = {**DEFAULTS, "memory_creep_intervals": 4}
    flat = [train(i, mem_peak_bytes=100) for i in range(10)]
    assert fired(AlertRules(cfg), flat) == []
    rising = [train(i, mem_peak_bytes=100 + i) for i in range(10)]
    assert fired(AlertRules(cfg), rising) == [(4, "memory_creep")]


def test_input_bound_needs_consecutive_intervals() -> None:
    waits = [0.3, 0.3, 0.05, 0.3, 0.3, 0.3]
    got = fired(AlertRules(DEFAULTS), [train(i, data_wait_frac=w) for i, w in enumerate(waits)])
    assert got == [(5, "input_bound")]  # three in a row (the default), not the first two


def test_straggler_rule() -> None:
    records = [train(i, rank_busy_s=[0.1, 0.2]) for i in range(3)]
    assert fired(AlertRules(DEFAULTS), records) == [(0, "straggler")]


def test_an_alert_fires_again_after_a_quiet_spell() -> None:
    scales = [0.5, 0.5, *[1024.0] * QUIET, 0.5]
    records = [train(i, grad_scale=s, skipped_steps=1) for i, s in enumerate(scales)]
    assert fired(AlertRules(DEFAULTS), records) == [(0, "scale_collapse"), (5, "scale_collapse")]


def test_off_silences_a_rule() -> None:
    records = [train(1, grad_scale=0.5, skipped_steps=3)]
    assert fired(AlertRules({**DEFAULTS, "scale_collapse": "off"}), records) == []


class Sink:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(dict(record))


def diagnostics(control: Control, **alerts: Any) -> tuple[Diagnostics, Sink]:
    sink = Sink()
    diag = Diagnostics(
        sink,  # type: ignore[arg-type]
        log_every=10,
        data={"loader": "device"},
        device="cpu",
        alerts={**DEFAULTS, **alerts},
        control=control,
    )
    return diag, sink


@pytest.mark.parametrize("action", ["warn", "pause", "checkpoint", "stop"])
def test_each_action_acts_on_the_control(action: str) -> None:
    control = Control()
    diag, sink = diagnostics(control, scale_collapse=action)
    diag.check(train(10, grad_scale=0.25, skipped_steps=9), 10)
    (alert,) = [r for r in sink.records if r.get("kind") == "alert"]
    assert alert["alert"] == "scale_collapse" and alert["action"] == action
    assert alert["grad_scale"] == 0.25 and alert["step"] == 10 and alert["level"] == "warning"
    assert control.paused == (action == "pause")
    assert control.take_checkpoint_request() == (action == "checkpoint")
    assert control.stop_requested == (action == "stop")
    if action == "stop":
        assert control.stop_reason == "stopped by alert scale_collapse"
        assert control.exit_code == 1


def test_on_alert_gets_the_alert_as_json(tmp_path: Path) -> None:
    out = tmp_path / "alert.json"
    diag, sink = diagnostics(Control(), on_alert=f"cat > {out}")
    diag.check(train(10, grad_scale=0.25, skipped_steps=9), 10)
    diag.close()  # waits for the command
    alert = json.loads(out.read_text())
    assert alert["kind"] == "alert" and alert["alert"] == "scale_collapse"
    assert alert["grad_scale"] == 0.25 and "collapsed" in alert["message"]
    assert not [r for r in sink.records if r.get("kind") == "alert_hook"]


@pytest.mark.parametrize(
    ("command", "words"),
    [("echo nope >&2; exit 3", "exit code 3 nope"), ("sleep 5", "still running after 0.5 s")],
)
def test_a_failing_on_alert_command_is_an_event(command: str, words: str) -> None:
    diag, sink = diagnostics(Control(), on_alert=command, on_alert_timeout_s=0.5)
    diag.check(train(10, grad_scale=0.25, skipped_steps=9), 10)
    diag.close()
    (event,) = [r for r in sink.records if r.get("kind") == "alert_hook"]
    assert words in event["message"] and event["level"] == "warning"


def test_a_stall_is_an_alert() -> None:
    control = Control()
    control.state, control.step = "running", 7
    diag, sink = diagnostics(control)
    with StallWatch(control, diag, stall_s=0.2):
        deadline = time.monotonic() + 10
        while not sink.records and time.monotonic() < deadline:
            time.sleep(0.05)
    (alert,) = sink.records
    assert alert["alert"] == "stall" and alert["last_step"] == 7
    assert "no optimizer step for" in alert["message"]


def test_no_stall_while_paused() -> None:
    control = Control()
    control.state, control.step = "paused", 7
    diag, sink = diagnostics(control)
    with StallWatch(control, diag, stall_s=0.1):
        time.sleep(0.6)
    assert sink.records == []


@pytest.mark.slow
def test_a_diverging_run_reaches_the_on_alert_script(tmp_path: Path) -> None:
    """SGD at lr 10 diverges within a few steps: the alert (a loss spike, or the non-finite
    loss that stops the run) reaches the script as one JSON object."""
    script = tmp_path / "notify.py"
    got = tmp_path / "alerts.jsonl"
    script.write_text(
        "import json, sys\n"
        "alert = json.loads(sys.stdin.read())\n"
        f"open({str(got)!r}, 'a').write(json.dumps(alert) + '\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUITRAIN_NO_DOWNLOAD": "1"}
    args = ["--no-ui", "--run-dir", str(tmp_path / "run"), "--max-steps", "40",
            "--log-every", "1", "--set", "optim.name='sgd'", "--set", "optim.lr=10.0",
            "--set", "data.train_samples=2048", "--set", "data.val_samples=256",
            "--on-alert", f"{sys.executable} {script}"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", *args],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    alerts = [json.loads(line) for line in got.read_text().splitlines()]
    assert alerts, proc.stderr
    assert all(a["kind"] == "alert" and a["alert"] for a in alerts)
    assert {a["alert"] for a in alerts} & {"loss_spike", "nonfinite_loss"}, alerts
    assert "alert " in proc.stderr  # headless: a line on stderr
    logged = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # every alert reached the script once; two of one log point may arrive in either order
    # (each hook runs in a thread of its own)
    written = sorted(r["alert"] for r in logged if r.get("kind") == "alert")
    assert written == sorted(a["alert"] for a in alerts)


@pytest.mark.parametrize(
    ("precision", "native", "advised"),
    [("fp16", True, True), ("fp16", False, False), ("bf16", True, False)],
)
def test_precision_advice_once_per_run(precision: str, native: bool, advised: bool) -> None:
    sink = Sink()
    diag = Diagnostics(
        sink,  # type: ignore[arg-type]
        log_every=10,
        data={"loader": "device"},
        device="cuda:0",
        alerts=DEFAULTS,
        precision=precision,
        bf16_native=native,
    )
    diag.check(train(10, grad_scale=32768.0, skipped_steps=0), 10)
    assert not [r for r in sink.records if r.get("kind") == "advice"]  # nothing skipped yet
    for step in (20, 30):
        diag.check(train(step, grad_scale=16384.0, skipped_steps=2), step)
    advice = [r for r in sink.records if r.get("kind") == "advice"]
    assert len(advice) == (1 if advised else 0)
    if advised:
        assert "--precision bf16" in advice[0]["message"] and "(10.0%)" in advice[0]["message"]
        assert advice[0]["skip_rate"] == 0.1
