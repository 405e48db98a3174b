"""A run that diverges from its first steps raises the divergence alert (issue #28: lr=10 on
fashion-mini gave a loss of 1.5e6 and chance accuracy and no alert), and the on_alert command
runs; a healthy run raises none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuitrain.engine import run
from tuitrain.metrics.alerts import AlertRules
from tuitrain.metrics.sinks import Sink


class Records(Sink):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record) -> None:
        self.records.append(dict(record))

    def alerts(self) -> list[dict]:
        return [r for r in self.records if r.get("kind") == "alert"]


@pytest.mark.slow
def test_lr_10_raises_divergence_on_the_loss_and_at_chance(tiny_config, tmp_path: Path) -> None:
    hook = tmp_path / "alerts.jsonl"
    cfg = tiny_config("optim.lr=10", "train.precision=fp32", "train.epochs=2",
                      f'alerts.on_alert="cat >> {hook}"')  # fmt: skip
    sink = Records()
    result = run(cfg, sink)
    assert result.status == "completed"
    divergence = [a for a in sink.alerts() if a["alert"] == "divergence"]
    assert len(divergence) == 2, sink.alerts()
    assert divergence[0]["reference_loss"] > 2.30 and divergence[0]["loss"] > 23  # 10x ln 10
    assert divergence[1]["metric"] == "val_acc" and divergence[1]["chance"] == 0.1
    assert hook.read_text().count('"alert": "divergence"') == 2  # on_alert ran for each


@pytest.mark.slow
def test_a_healthy_run_raises_no_divergence(tiny_config) -> None:
    sink = Records()
    run(tiny_config("train.precision=fp32", "train.epochs=2"), sink)
    assert not [a for a in sink.alerts() if a["alert"] == "divergence"]


def test_without_a_chance_level_the_first_loss_is_the_reference() -> None:
    rules = AlertRules({"divergence_factor": 10.0})
    assert rules.judge({"loss": 2.0, "step": 1}) == []
    assert rules.judge({"loss": 19.0, "step": 2}) == []
    (alert,) = rules.judge({"loss": 25.0, "step": 3})
    assert alert.name == "divergence" and alert.figures["reference_loss"] == 2.0
    assert json.dumps(alert.figures)
