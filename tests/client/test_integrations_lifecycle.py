"""The adapters across a framework's usual calls in one process: Lightning's `fit` then
`test`, HF's `train` then `evaluate`; and the names the frameworks use (train_loss_step,
val_loss_epoch, lr-Adam, HF's end-of-training mean train_loss) mapped for the panels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tuitrain.client import core as client


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def points(n: int = 128) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.linspace(-1, 1, 8))


def test_lightning_fit_then_test_in_one_run_with_its_names(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning")  # noqa: N806 - Lightning's own alias
    from lightning.pytorch.callbacks import LearningRateMonitor

    from tuitrain.lightning import TuitrainLogger

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def _loss(self, batch):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

        def training_step(self, batch, _i):
            loss = self._loss(batch)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, _i):
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch, _i):
            self.log("test_loss", self._loss(batch))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.05)

    loader = torch.utils.data.DataLoader(points(), batch_size=32)
    logger = TuitrainLogger(run_dir=str(tmp_path / "pl"))
    trainer = L.Trainer(
        max_epochs=2, logger=logger, log_every_n_steps=2, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        callbacks=[LearningRateMonitor(logging_interval="step")],
    )  # fmt: skip
    model = Regressor()
    trainer.fit(model, loader, loader)
    run = logger.experiment
    assert not run.finished and client.current() is run  # fit's end no longer ends the run
    trainer.test(model, loader)
    run.finish()  # what the exit hook does at interpreter exit
    recs = records(tmp_path / "pl")
    assert sum(r["type"] == "end" for r in recs) == 1 and recs[-1]["status"] == "completed"
    losses = [r for r in recs if r["type"] == "train" and "loss" in r]
    assert [r["step"] for r in losses] == [1, 3, 5, 7]  # the step values, every 2 steps
    assert all("train_loss_step" in r for r in losses)  # the original name kept
    assert any("train_loss_epoch" in r for r in recs)
    assert any("lr" in r and "lr-Adam" in r for r in recs if r["type"] == "train")
    evals = [r for r in recs if r["type"] == "eval"]
    assert len(evals) == 2 and all(r["val_loss"] > 0 for r in evals)
    tests = [r for r in recs if "test_loss" in r]  # trainer.test()'s metric arrived
    assert len(tests) == 1 and tests[0]["test_loss"] > 0


def test_lightning_validate_names_map_to_val(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from tuitrain.lightning import lightning_names

    assert lightning_names({"valid_loss": 1.0, "epoch": 3}) == {
        "val/valid_loss": 1.0, "val/loss": 1.0, "epoch": 3
    }  # fmt: skip
    assert lightning_names({"val_acc_epoch": 0.5}) == {"val_acc_epoch": 0.5, "val_acc": 0.5}
    # a name the script logged itself wins over a mapped one
    assert lightning_names({"lr": 1.0, "lr-SGD": 2.0}) == {"lr": 1.0, "lr-SGD": 2.0}
    assert lightning_names({"val_loss": 1.0, "val_loss_epoch": 2.0}) == {
        "val_loss": 1.0, "val_loss_epoch": 2.0
    }  # fmt: skip


def test_hf_train_then_evaluate_in_one_run_the_mean_loss_a_summary(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from tuitrain.hf import TuitrainCallback

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x, labels=None):
            pred = self.net(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}

    rows = [{"x": x, "labels": y} for x, y in points()]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=10, per_device_train_batch_size=16,
        logging_steps=5, report_to="none", use_cpu=True, save_strategy="no",
        disable_tqdm=True, learning_rate=0.05,
    )  # fmt: skip
    callback = TuitrainCallback(run_dir=str(tmp_path / "hf"))
    trainer = transformers.Trainer(
        model=Regressor(), args=args, train_dataset=rows, eval_dataset=rows[:32],
        callbacks=[callback],
    )  # fmt: skip
    out = trainer.train()
    assert callback.run is not None and not callback.run.finished
    trainer.evaluate()  # after train(): lands in the same run
    callback.run.finish()
    recs = records(tmp_path / "hf")
    trains = [r for r in recs if r["type"] == "train" and "loss" in r]
    assert [r["step"] for r in trains] == [5, 10]
    assert trains[-1]["loss"] != pytest.approx(out.training_loss)  # the last real point
    evals = [r for r in recs if r["type"] == "eval"]
    assert [r["step"] for r in evals] == [10] and evals[0]["val_loss"] > 0
    end = recs[-1]
    assert end["type"] == "end" and sum(r["type"] == "end" for r in recs) == 1
    assert end["summary"]["train_loss"] == pytest.approx(out.training_loss)


@pytest.mark.parametrize(
    ("raised", "status", "reason"),
    [
        (ValueError("Invalid learning rate: -1.0"), "failed", "ValueError: Invalid learning rate"),
        (KeyboardInterrupt(), "stopped", "stopped by SIGINT"),
    ],
)
def test_lightning_failure_and_interrupt_end_with_their_exit_code(
    tmp_path: Path, raised: BaseException, status: str, reason: str
) -> None:
    """Lightning's finalize("failed") ends the run with what happened and the exit code the
    process is about to have: 1 (the exception re-raised, or Lightning's own sys.exit(1)
    after an interrupt)."""
    L = pytest.importorskip("lightning")  # noqa: N806 - Lightning's own alias

    from tuitrain.lightning import TuitrainLogger

    class Breaks(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, i):
            if i == 2:
                raise raised
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    logger = TuitrainLogger(run_dir=str(tmp_path / "pl"))
    trainer = L.Trainer(
        max_epochs=1, logger=logger, log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    loader = torch.utils.data.DataLoader(points(), batch_size=32)
    with pytest.raises((ValueError, SystemExit)):
        trainer.fit(Breaks(), loader)
    end = records(tmp_path / "pl")[-1]
    assert end["type"] == "end" and end["status"] == status, end
    assert reason in end["reason"] and end["exit_code"] == 1, end
