"""`python -m tuitrain.wandb script.py` routes `import wandb` in the processes the script
starts too: launchers that run the script again as plain `python script.py` (Lightning's DDP
launcher, accelerate, torchrun) or start a multiprocessing spawn child. The real wandb is not
installed here, so an unrouted child dies on `import wandb`, as rank 1 did in the issue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def run_routed(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUITRAIN_")}
    return subprocess.run(
        [sys.executable, "-m", "tuitrain.wandb", str(path), *args],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_script_started_again_as_plain_python_and_a_spawn_child_are_routed(
    tmp_path: Path,
) -> None:
    """The script re-runs itself as `python train.py child` (what Lightning's and accelerate's
    launchers do) and starts a spawn child; each imports wandb and logs a run of its own."""
    done = run_routed(
        tmp_path,
        """
        import multiprocessing as mp, subprocess, sys

        def log(name):
            import wandb
            assert wandb.__name__ == "tuitrain.wandb", wandb.__name__
            run = wandb.init(dir=name, name=name)
            for i in range(3):
                wandb.log({"loss": 1.0 / (i + 1)})
            run.finish()

        if __name__ == "__main__":
            if sys.argv[1:] == ["child"]:
                log("again")
            else:
                log("first")
                subprocess.run([sys.executable, sys.argv[0], "child"], check=True)
                p = mp.get_context("spawn").Process(target=log, args=("spawned",))
                p.start(); p.join()
                sys.exit(p.exitcode)
        """,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("first", "again", "spawned"):
        run_dirs = [d for d in (tmp_path / name).rglob("metrics.jsonl")]
        assert len(run_dirs) == 1, (name, done.stderr[-2000:])
        recs = records(run_dirs[0].parent)
        assert [r["loss"] for r in recs if r["type"] == "train"] == pytest.approx([1, 1 / 2, 1 / 3])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lightning_ddp_rank_1_is_routed(tmp_path: Path) -> None:
    """Lightning's DDP launcher (`_SubprocessScriptLauncher`) starts rank 1 as plain `python
    train.py`: with the WandbLogger both ranks run, rank 0's run holds the losses."""
    pytest.importorskip("lightning")
    done = run_routed(
        tmp_path,
        """
        import lightning as L, torch
        from lightning.pytorch.loggers import WandbLogger

        class Tiny(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(4, 1)
            def training_step(self, batch, i):
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
                self.log("train_loss", loss)
                return loss
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.05)

        if __name__ == "__main__":
            g = torch.Generator().manual_seed(0)
            x, y = torch.randn(64, 4, generator=g), torch.randn(64, generator=g)
            data = torch.utils.data.TensorDataset(x, y)
            trainer = L.Trainer(
                accelerator="cpu", devices=2, strategy="ddp", max_steps=4, log_every_n_steps=1,
                logger=WandbLogger(project="p", save_dir="lw", name="ddp"),
                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            )
            trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = sorted(p.parent for p in tmp_path.rglob("metrics.jsonl"))
    assert found, done.stderr[-3000:]
    recs = records(found[0])
    assert any("train_loss" in r or "loss" in r for r in recs if r["type"] == "train")


def test_the_childrens_wandb_metadata_is_the_faces_version() -> None:
    """Lightning asks `importlib.metadata` whether wandb is installed before anything imports
    it: the children's folder answers with the face's version, kept in step here."""
    from importlib.metadata import distributions

    import tuitrain.wandb
    from tuitrain.wandb._routing import routed_children

    folder = routed_children("wandb")
    assert folder is not None
    (found,) = list(distributions(name="wandb", path=[folder]))
    assert found.version == tuitrain.wandb.__version__
