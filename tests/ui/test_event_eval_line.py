"""The event log's eval line shows what the evaluation holds, and nothing it does not."""

from __future__ import annotations

from tuitrain.ui.widgets.events import eval_line


def test_an_evaluation_without_a_val_loss_shows_no_val_loss() -> None:
    rec = {"type": "eval", "step": 50, "val_acc": 0.8531}  # a script logging val/acc alone
    line = eval_line(rec)
    assert "val_loss" not in line
    assert line.startswith("eval at step 50: val_acc ")


def test_the_val_loss_comes_first_when_the_evaluation_has_one() -> None:
    rec = {"type": "eval", "step": 50, "epoch": 1, "val_acc": 0.85, "val_loss": 0.4012}
    assert eval_line(rec).startswith("epoch 1 done: val_loss 0.4012 nats · val_acc ")


def test_an_evaluation_with_no_metric_is_its_place_alone() -> None:
    assert eval_line({"type": "eval", "step": 7}) == "eval at step 7"
