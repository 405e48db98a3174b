"""The framework integrations with the real libraries: a Lightning module with
TuitrainLogger, a Hugging Face Trainer with TuitrainCallback. Each gives a run that `watch`
reads and `export` writes, with the framework's own metric names."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from tuitrain.commands.export import main as export_main
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def readers_agree(run_dir: Path, tmp_path: Path, wanted: set[str]) -> None:
    store = MetricStore()
    JsonlFollower(run_dir / "metrics.jsonl", store).poll()
    snap = store.snapshot()
    assert snap.end is not None and wanted <= set(snap.series)  # what watch draws
    out = tmp_path / "out.csv"
    assert export_main([str(run_dir), "--format", "csv", "--out", str(out)]) == 0
    assert wanted <= set(next(csv.DictReader(out.open())))


def points(n: int = 256) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.linspace(-1, 1, 8))


def test_a_lightning_module_with_the_logger(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning")  # noqa: N806 - Lightning's own alias
    from tuitrain.lightning import TuitrainLogger

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters({"lr": 0.05, "width": 8})
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, _i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
            self.log("train_loss", loss)
            self.log("weight_norm", self.net.weight.norm())
            return loss

        def validation_step(self, batch, _i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    loader = torch.utils.data.DataLoader(points(), batch_size=32)
    logger = TuitrainLogger(run_dir=str(tmp_path / "pl"))
    trainer = L.Trainer(
        max_epochs=2, logger=logger, log_every_n_steps=2, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(Regressor(), loader, loader)
    logger.experiment.finish()  # what the exit hook does at interpreter exit
    recs = records(tmp_path / "pl")
    assert recs[0]["preset"] == "lightning"
    config = [r["config"] for r in recs if r.get("kind") == "config"]
    assert {"lr": 0.05, "width": 8} in config
    trains = [r for r in recs if r["type"] == "train" and "loss" in r]
    assert len(trains) == 8 and all(r["weight_norm"] > 0 for r in trains)  # 16 steps / 2
    evals = [r for r in recs if r["type"] == "eval"]
    assert len(evals) == 2 and evals[-1]["val_loss"] < evals[0]["val_loss"]
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
    readers_agree(tmp_path / "pl", tmp_path, {"loss", "weight_norm", "val_loss"})


def test_a_hugging_face_trainer_with_the_callback(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from tuitrain.hf import TuitrainCallback

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x, labels=None):
            pred = self.net(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}

    data = points()
    rows = [{"x": x, "labels": y} for x, y in data]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=20, per_device_train_batch_size=16,
        logging_steps=5, eval_strategy="steps", eval_steps=10, report_to="none",
        use_cpu=True, save_strategy="no", disable_tqdm=True, learning_rate=0.05,
    )  # fmt: skip
    callback = TuitrainCallback(run_dir=str(tmp_path / "hf"))
    trainer = transformers.Trainer(
        model=Regressor(), args=args, train_dataset=rows, eval_dataset=rows[:64],
        callbacks=[callback],
    )  # fmt: skip
    trainer.train()
    assert callback.run is not None
    callback.run.finish()  # what the exit hook does at interpreter exit
    recs = records(tmp_path / "hf")
    assert recs[0]["preset"] == "hf" and recs[0]["config"]["script"]["args"]["max_steps"] == 20
    trains = [r for r in recs if r["type"] == "train" and "loss" in r]
    assert [r["step"] for r in trains] == [5, 10, 15, 20]
    assert all(r["lr"] > 0 and "grad_norm" in r for r in trains)
    evals = [r for r in recs if r["type"] == "eval"]
    assert [r["step"] for r in evals] == [10, 20] and all(r["val_loss"] > 0 for r in evals)
    assert recs[-1]["status"] == "completed"
    readers_agree(tmp_path / "hf", tmp_path, {"loss", "lr", "val_loss"})
