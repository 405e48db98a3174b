"""The frameworks' own wandb and trackio paths routed to tuitrain (issue "Your script, first
class"): `tuitrain.wandb.install()` before HF's `report_to="wandb"` or Lightning's
`WandbLogger`, `tuitrain.trackio.install()` before HF's `report_to="trackio"`, a trackio-README
script; and the wandb run's odds and ends (media left out once per kind, artifacts, watch ...).
Every test puts `sys.modules` and `sys.meta_path` back as they were."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tuitrain.trackio
import tuitrain.wandb
from tuitrain.client import core as client
from tuitrain.core.errors import UserError

ROUTED = ("wandb", "trackio")


def records(run_dir: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").open()]


def of(recs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in recs if r["type"] == kind]


def config_events(recs: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for r in of(recs, "event"):
        if r.get("kind") == "config":
            merged.update(r["config"])
    return merged


@pytest.fixture(autouse=True)
def _restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """sys.modules, sys.meta_path, the faces' runs and context vars as they were."""
    for name in ("TUITRAIN_RUN_DIR", "WANDB_MODE", "WANDB_DISABLED", "WANDB_PROJECT",
                 "WANDB_LOG_MODEL", "WANDB_WATCH"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ROUTED}
    meta_path = list(sys.meta_path)
    dict.clear(tuitrain.wandb.config)
    yield
    tuitrain.wandb.finish()
    tuitrain.trackio.finish()
    client.finish()
    for name in [k for k in sys.modules if k.split(".")[0] in ROUTED]:
        del sys.modules[name]
    sys.modules.update(saved)
    sys.meta_path[:] = meta_path
    tuitrain.trackio.context_vars.current_run.set(None)
    tuitrain.trackio.context_vars.current_project.set(None)
    dict.clear(tuitrain.wandb.config)
    # what install() told a framework imported before it, asked again without the routing
    tracking = sys.modules.get("accelerate.tracking")
    if tracking is not None:
        tracking._available_trackers[:] = [
            t for t in tracking._available_trackers
            if str(t) not in ROUTED or importlib.util.find_spec(str(t)) is not None
        ]  # fmt: skip
    for name in ("lightning.pytorch.loggers.wandb", "pytorch_lightning.loggers.wandb"):
        cache = getattr(sys.modules.get(name), "_WANDB_AVAILABLE", None)
        if cache is not None:
            vars(cache).pop("available", None)


def points(n: int = 128) -> Any:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.linspace(-1, 1, 8))


# ---------------------------------------------------------------------- routing itself
def test_install_routes_import_wandb_and_what_the_frameworks_import() -> None:
    tuitrain.wandb.install()
    tuitrain.wandb.install()  # idempotent
    import wandb
    from wandb.sdk.lib import RunDisabled
    from wandb.sdk.lib.config_util import ConfigError
    from wandb.wandb_run import Run

    assert wandb is tuitrain.wandb and Run is tuitrain.wandb.wandb_run.Run
    assert RunDisabled is tuitrain.wandb.wandb_run.RunDisabled
    assert issubclass(ConfigError, wandb.Error) and hasattr(wandb, "run")
    assert sys.modules["wandb.sdk.wandb_run"] is sys.modules["wandb.wandb_run"]
    assert len(wandb.util.generate_id()) == 8
    assert importlib.metadata.version("wandb") == wandb.__version__
    from lightning_utilities.core.imports import RequirementCache

    assert bool(RequirementCache("wandb>=0.12.10"))  # Lightning's check for WandbLogger
    assert sum(1 for f in sys.meta_path if type(f).__name__ == "_Distributions") == 1


def test_install_refuses_where_the_real_wandb_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    with pytest.raises(UserError, match="the real wandb is imported already"):
        tuitrain.wandb.install()
    monkeypatch.setitem(sys.modules, "trackio", types.ModuleType("trackio"))
    with pytest.raises(UserError, match="call install\\(\\) first"):
        tuitrain.trackio.install()


def test_install_routes_import_trackio() -> None:
    tuitrain.trackio.install()
    import trackio
    from trackio import context_vars

    assert trackio is tuitrain.trackio and context_vars.current_space_id.get() is None
    assert sys.modules["trackio.context_vars"] is context_vars
    assert importlib.metadata.version("trackio") == trackio.__version__
    assert trackio.freeze(space_id=None) is None and trackio.sync(project="p") is None


@pytest.mark.slow
def test_install_and_the_routed_imports_cost_no_torch(tmp_path: Path) -> None:
    code = (
        "import sys, tuitrain.wandb, tuitrain.trackio\n"
        "tuitrain.wandb.install(); tuitrain.trackio.install()\n"
        "import wandb, trackio\n"
        "from wandb.sdk.lib import RunDisabled\n"
        "from wandb.wandb_run import Run\n"
        f"run = wandb.init(dir={str(tmp_path)!r})\n"
        "wandb.log({'loss': 1.0}); wandb.finish()\n"
        "print('torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TUITRAIN_RUN_DIR"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, check=True)  # fmt: skip
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("face", ["wandb", "trackio"])
def test_python_m_runs_an_unchanged_script_routed(tmp_path: Path, face: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        f"import sys, {face}\n"
        f"{face}.init(project='p', config={{'lr': 0.1}})\n"
        f"for i in range(3): {face}.log({{'train_loss': 1.0 / (i + 1)}})\n"
        f"{face}.finish()\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    env = {**os.environ, "TUITRAIN_RUN_DIR": str(tmp_path / "run")}
    done = subprocess.run([sys.executable, "-m", f"tuitrain.{face}", str(script), "3"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 3, done.stderr  # the script's own exit code
    recs = records(tmp_path / "run")
    assert recs[0]["preset"] == "train" and recs[0]["config"]["script"] == {"lr": 0.1}
    assert [r["loss"] for r in of(recs, "train")] == pytest.approx([1.0, 1 / 2, 1 / 3])
    assert of(recs, "end")[0]["status"] == "completed"  # finish() came before the exit


# ---------------------------------------------------------------------- the wandb run's odds
def test_the_run_is_wandbs_shape_and_its_other_methods_never_raise(tmp_path: Path) -> None:
    tuitrain.wandb.install()
    import wandb

    run = wandb.init(project="p", dir=str(tmp_path), config={"lr": 0.1})
    assert isinstance(run, wandb.wandb_run.Run) and isinstance(run.dir, str)
    assert run.settings.mode == "offline" and run.settings.files_dir == run.dir
    artifact = wandb.Artifact("model", type="model", metadata={"a": 1})
    with artifact.new_file("arch.txt", mode="wb") as f:
        f.write(b"x")
    artifact.add_file(__file__, name="x")
    artifact.add_dir(str(tmp_path))
    assert run.log_artifact(artifact, aliases=["latest"]) is artifact
    assert isinstance(run.use_artifact("model:latest").download(), str)
    assert wandb.log_artifact(artifact) is artifact  # HF's on_save calls the module's
    assert run.save("*.pt") == []
    run.watch(object(), log="all")
    run.unwatch()
    run.log_code(".")
    run.mark_preempting()
    run._label(code="transformers_trainer")
    run.alert(title="t", text="x", level=wandb.AlertLevel.ERROR)
    run.define_metric("val/*", step_metric="epoch")
    run.some_future_method(1, key=2).anything()  # a public name it lacks: a no-op
    wandb.termwarn("careful", repeat=False)
    wandb.require("service")
    assert wandb._attach("x") is run
    run.finish()
    recs = records(run.dir)
    assert of(recs, "end")[0]["status"] == "completed"
    assert [r["level"] for r in of(recs, "event") if r.get("alert") == "script"] == ["error"]
    said = [r for r in of(recs, "event") if "artifacts are not kept" in r["message"]]
    assert len(said) == 1  # once, however many artifacts


def test_a_disabled_run_takes_the_frameworks_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    tuitrain.wandb.install()
    import wandb
    from wandb.sdk.lib import RunDisabled

    run = wandb.init(project="p")
    assert isinstance(run, RunDisabled) and isinstance(run.dir, str)
    run._label(code="transformers_trainer")  # HF's setup
    run.define_metric("*", step_metric="trainer/global_step", step_sync=True)  # Lightning's
    run.log_artifact(wandb.Artifact("m", type="model"))
    wandb.log({"loss": 1.0, "img": wandb.Image(b"x")})
    assert run.settings.mode == "disabled"
    wandb.finish()


def test_media_are_left_out_with_one_warning_per_kind(tmp_path: Path) -> None:
    wandb = tuitrain.wandb
    run = wandb.init(dir=str(tmp_path))
    kinds = ["Image", "Table", "Histogram", "Video", "Audio", "Html"]
    for step in range(3):
        row: dict[str, Any] = {f"m_{k}": getattr(wandb, k)(b"data") for k in kinds}
        row["chart"] = wandb.plot.line(wandb.Table(data=[[1, 2]], columns=["a", "b"]), "a", "b")
        row["gallery"] = [wandb.Image(b"1"), wandb.Image(b"2")]  # Lightning's log_image
        row["nested"] = {"img": wandb.Image(b"3"), "loss": 0.5}
        row["loss"] = 1.0 / (step + 1)
        wandb.log(row)
    run.finish()
    recs = records(run.dir)
    said = [r["message"] for r in of(recs, "event") if "left out" in r["message"]]
    assert sorted(m.split()[1] for m in said) == sorted(
        [f"wandb.{k}" for k in kinds] + ["wandb.plot"]
    )  # one each, whatever the calls
    assert [r["loss"] for r in of(recs, "train")] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert [r["nested/loss"] for r in of(recs, "train")] == [0.5, 0.5, 0.5]
    assert of(recs, "end")[0]["dropped_values"] == 3 * 9  # every value left out, counted


def test_define_metric_star_makes_that_metric_the_step(tmp_path: Path) -> None:
    wandb = tuitrain.wandb
    run = wandb.init(dir=str(tmp_path))
    wandb.define_metric("train/global_step")
    wandb.define_metric("*", step_metric="train/global_step", step_sync=True)
    wandb.log({"train/loss": 2.0, "train/global_step": 5})
    wandb.log({"train/loss": 1.0, "train/global_step": 10})
    wandb.log({"eval/loss": 0.5})  # no step metric: its last value (wandb's step_sync)
    run.finish()
    recs = records(run.dir)
    assert [(r["step"], r["loss"]) for r in of(recs, "train")] == [(5, 2.0), (10, 1.0)]
    assert [(r["step"], r["val_loss"]) for r in of(recs, "eval")] == [(10, 0.5)]
    assert not any("train/global_step" in r for r in of(recs, "train"))


# ---------------------------------------------------------------------- trackio
def test_a_trackio_readme_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "run"))
    tuitrain.trackio.install()
    import trackio

    config = {"epochs": 4, "learning_rate": 0.001, "batch_size": 64}
    trackio.init(project="fashion-mnist", name="baseline", config=config)
    assert trackio.config["batch_size"] == 64
    assert trackio.context_vars.current_project.get() == "fashion-mnist"
    for epoch in range(config["epochs"]):
        trackio.log({
            "epoch": epoch, "train_loss": 1.0 / (epoch + 1), "train_accuracy": 0.5 + epoch / 10,
            "val_loss": 1.2 / (epoch + 1), "val_accuracy": 0.4 + epoch / 10,
        })  # fmt: skip
    trackio.alert(title="plateau", text="val_loss flat", level=trackio.AlertLevel.WARN)
    trackio.finish()
    recs = records(tmp_path / "run")
    header = recs[0]
    assert header["preset"] == "baseline" and header["config"]["script"] == config
    assert header["config"]["meta"] == {"project": "fashion-mnist"}
    trains = of(recs, "train")
    assert [r["step"] for r in trains] == [0, 1, 2, 3]
    assert [r["loss"] for r in trains] == pytest.approx([1.0, 1 / 2, 1 / 3, 1 / 4])
    assert [r["epoch"] for r in trains] == [0, 1, 2, 3]
    assert trains[3]["train_accuracy"] == pytest.approx(0.8)
    evals = of(recs, "eval")
    assert [r["step"] for r in evals] == [0, 1, 2, 3]
    assert evals[2]["val_loss"] == pytest.approx(0.4)
    assert evals[2]["val_accuracy"] == evals[2]["val_acc"] == pytest.approx(0.6)  # both kept
    assert [r["level"] for r in of(recs, "event") if r.get("alert") == "script"] == ["warning"]
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
    with pytest.raises(RuntimeError, match="trackio.init"):
        trackio.log({"loss": 1.0})  # as trackio: no run, no log


def test_trackio_names_keep_each_original() -> None:
    got = tuitrain.trackio.trackio_names(
        {"valid_f1": 0.7, "train_lr": 0.1, "val_accuracy": 0.9, "lr": 0.2, "val_acc": 0.8}
    )
    assert got == {"val/valid_f1": 0.7, "val/f1": 0.7, "train_lr": 0.1, "val_accuracy": 0.9,
                   "lr": 0.2, "val_acc": 0.8}  # fmt: skip


# ---------------------------------------------------------------------- the frameworks
def hf_trainer(tmp_path: Path, report_to: str, run_name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    import torch

    class Regressor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
            pred = self.net(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}

    rows = [{"x": x, "labels": y} for x, y in points()]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=20, per_device_train_batch_size=16,
        logging_steps=5, eval_strategy="steps", eval_steps=10, report_to=report_to,
        use_cpu=True, save_strategy="no", disable_tqdm=True, learning_rate=0.05,
        run_name=run_name,
    )  # fmt: skip
    return transformers.Trainer(
        model=Regressor(), args=args, train_dataset=rows, eval_dataset=rows[:64]
    )


def assert_hf_run(recs: list[dict[str, Any]], name: str) -> None:
    assert recs[0]["preset"] == name and recs[0]["config"]["meta"] == {"project": "huggingface"}
    assert config_events(recs)["max_steps"] == 20  # TrainingArguments, after init
    trains = [r for r in of(recs, "train") if "loss" in r]
    assert [r["step"] for r in trains] == [5, 10, 15, 20]
    assert all(r["lr"] > 0 and r["grad_norm"] > 0 and r["epoch"] > 0 for r in trains)
    assert trains[-1]["loss"] < trains[0]["loss"]
    assert not any("train/global_step" in r for r in of(recs, "train"))  # it is the step
    assert [r["step"] for r in of(recs, "eval")] == [10, 20]
    assert all(r["val_loss"] > 0 for r in of(recs, "eval"))
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"


@pytest.mark.slow
def test_hf_report_to_wandb_after_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "run"))
    tuitrain.wandb.install()
    trainer = hf_trainer(tmp_path, "wandb", "hf-wandb")
    trainer.train()
    import wandb

    assert wandb.run is not None and wandb.run.dir == str(tmp_path / "run")
    wandb.finish()  # HF leaves the run open (the exit hook or wandb.finish() ends it)
    recs = records(tmp_path / "run")
    assert_hf_run(recs, "hf-wandb")
    assert recs[-1]["summary"]["train_loss"] > 0  # HF's end-of-training mean, in the summary


@pytest.mark.slow
def test_hf_report_to_wandb_a_second_train_is_a_run_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """HF's WandbCallback finds the run open at the next train() (the same Trainer, or a
    second one) and logs on: its global step goes back, and each train() is a run of its
    own, as with TuitrainCallback, not rows placed over the first run's last step."""
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "run"))
    tuitrain.wandb.install()
    trainer = hf_trainer(tmp_path, "wandb", "hf-wandb")
    trainer.train()
    trainer.train()  # the same Trainer again
    hf_trainer(tmp_path, "wandb", "hf-wandb").train()  # a second Trainer, its own callback
    import wandb

    wandb.finish()
    dirs = [tmp_path / "run", tmp_path / "run-2", tmp_path / "run-3"]
    for n, run_dir in enumerate(dirs):
        recs = records(run_dir)
        if n == 0:
            assert_hf_run(recs, "hf-wandb")
        else:  # opened by the drop-in: the TrainingArguments in its header, its own metadata
            assert recs[0]["config"]["script"]["max_steps"] == 20
            assert recs[0]["preset"] == "hf-wandb" and recs[0]["config"]["meta"]["project"]
        trains = [r for r in of(recs, "train") if "loss" in r]
        assert [r["step"] for r in trains] == [5, 10, 15, 20]
        assert [r["step"] for r in of(recs, "eval")] == [10, 20]
        assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
        if n < 2:
            assert "went back to 5 (its next train())" in recs[-1]["reason"]


@pytest.mark.slow
def test_hf_report_to_trackio_after_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "run"))
    tuitrain.trackio.install()
    hf_trainer(tmp_path, "trackio", "hf-trackio").train()  # TrackioCallback finishes the run
    assert_hf_run(records(tmp_path / "run"), "hf-trackio")


@pytest.mark.slow
def test_lightning_wandb_logger_after_install(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning")  # noqa: N806 - Lightning's own alias
    import torch

    tuitrain.wandb.install()
    from lightning.pytorch.loggers import WandbLogger

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters({"lr": 0.05, "width": 8})
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, _i: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, _i: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    loader = torch.utils.data.DataLoader(points(), batch_size=32)
    logger = WandbLogger(project="pl", name="pl-wandb", save_dir=str(tmp_path))
    logger.log_image("samples", images=[torch.zeros(3, 4, 4)])  # left out, said once
    trainer = L.Trainer(
        max_epochs=2, logger=logger, log_every_n_steps=2, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(Regressor(), loader, loader)
    run_dir = logger.experiment.dir
    assert isinstance(run_dir, str) and Path(run_dir) == tmp_path / "tuitrain-pl-wandb"
    logger.experiment.finish()
    recs = records(run_dir)
    assert recs[0]["preset"] == "pl-wandb" and recs[0]["config"]["meta"] == {"project": "pl"}
    assert config_events(recs) == {"lr": 0.05, "width": 8}
    trains = of(recs, "train")
    assert [r["step"] for r in trains] == [1, 3, 5, 7]  # Lightning's trainer/global_step
    assert all(r["loss"] > 0 for r in trains) and trains[-1]["epoch"] == 1
    assert not any("trainer/global_step" in r for r in trains)
    evals = of(recs, "eval")
    assert [r["step"] for r in evals] == [3, 7] and evals[-1]["val_loss"] < evals[0]["val_loss"]
    said = [r for r in of(recs, "event") if "wandb.Image values are left out" in r["message"]]
    assert len(said) == 1 and recs[-1]["dropped_values"] == 1
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"


def test_accelerate_log_with_wandb_after_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    accelerate = pytest.importorskip("accelerate")
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "run"))
    tuitrain.wandb.install()
    acc = accelerate.Accelerator(log_with="wandb", cpu=True)
    acc.init_trackers("proj", config={"lr": 0.1})
    for step in range(3):
        acc.log({"train_loss": 1.0 / (step + 1)}, step=step * 10)
    acc.end_training()
    recs = records(tmp_path / "run")
    assert recs[0]["config"]["meta"] == {"project": "proj"}
    assert config_events(recs) == {"lr": 0.1}
    assert [(r["step"], r["loss"]) for r in of(recs, "train")] == [
        (0, 1.0), (10, 0.5), (20, pytest.approx(1 / 3))]  # fmt: skip
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"


def per_batch_validation_module(L: Any) -> Any:  # noqa: N803 - Lightning's own alias
    """Lightning's examples' habit: `on_step=True` in validation_step, `valid_*` names."""
    import torch

    class Classifierish(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def _loss(self, batch: Any) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

        def training_step(self, batch: Any, _i: int) -> Any:
            loss = self._loss(batch)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch: Any, _i: int) -> None:
            self.log("valid_loss", self._loss(batch), on_step=True, on_epoch=True)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Classifierish()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["tuitrain-logger", "wandb-logger"])
def test_lightning_per_batch_validation_values_are_kept(tmp_path: Path, path: str) -> None:
    """Lightning logs `on_step=True` validation values at the evaluation loop's own batch
    counter (0, 1, ... below the training step): none of them is dropped as a step going
    back; they land at the step the validation ran at, and Lightning's names map onto the
    loss and the validation loss through either logger."""
    L = pytest.importorskip("lightning")  # noqa: N806 - Lightning's own alias
    import torch

    if path == "wandb-logger":
        tuitrain.wandb.install()
        from lightning.pytorch.loggers import WandbLogger

        logger: Any = WandbLogger(project="pl", name="pl-valid", save_dir=str(tmp_path))
    else:
        from tuitrain.lightning import TuitrainLogger

        logger = TuitrainLogger(run_dir=str(tmp_path / "tuitrain-pl-valid"))
    loader = torch.utils.data.DataLoader(points(), batch_size=32)  # 4 batches
    trainer = L.Trainer(
        max_epochs=2, logger=logger, log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(per_batch_validation_module(L), loader, loader)
    logger.experiment.finish()
    recs = records(tmp_path / "tuitrain-pl-valid")
    end = recs[-1]
    assert end["type"] == "end" and end["status"] == "completed"
    assert end.get("dropped_rows", 0) == 0, end  # no row lost to a step going back
    trains = of(recs, "train")
    assert [r["step"] for r in trains if "loss" in r][:4] == [0, 1, 2, 3]
    assert all("train_loss_step" in r for r in trains if "loss" in r)  # the original kept
    evals = of(recs, "eval")
    assert len(evals) >= 2 and all(r["step"] >= 3 for r in evals)  # after the epoch's steps
    assert any(r.get("val_loss", 0) > 0 for r in evals)  # valid_loss_epoch -> val/loss
    said = [r["message"] for r in of(recs, "event")]
    assert any("current step" in m for m in said), said  # said once why
