"""The logging client in-process: records of the metric contract, steps, tensors, alerts."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
import torch

import tuitrain
from tuitrain.client import core as client
from tuitrain.client.core import eval_name


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def of(recs: list[dict], kind: str) -> list[dict]:
    return [r for r in recs if r["type"] == kind]


def untimed(record: dict) -> dict:
    """A record without its wall-clock `time` (every record carries one)."""
    assert isinstance(record.get("time"), str)
    return {k: v for k, v in record.items() if k != "time"}


def test_a_run_writes_header_train_eval_and_end(tmp_path: Path) -> None:
    run = tuitrain.init(tmp_path / "run", config={"lr": 0.1, "model": {"width": 8}}, name="t")
    for step in range(5):
        run.log({"loss": torch.tensor(1.0 / (step + 1)), "train/acc": step / 10, "lr": 0.1})
    run.log({"val/loss": 0.3, "eval/acc": torch.tensor(0.75)}, step=4)
    run.finish()
    recs = records(tmp_path / "run")
    header = recs[0]
    assert header["type"] == "header" and header["preset"] == "t" and header["client"] is True
    assert header["config"] == {"script": {"lr": 0.1, "model": {"width": 8}}}
    assert header["argv"] and header["hostname"] and header["task"]["name"] == "script"
    trains = of(recs, "train")
    assert [r["step"] for r in trains] == [0, 1, 2, 3, 4]
    assert trains[2]["loss"] == pytest.approx(1 / 3) and trains[2]["lr"] == 0.1
    assert trains[3]["train/acc"] == pytest.approx(0.3)  # the script's own metric, its name
    assert trains[-1]["host_rss_bytes"] > 0  # sampled at the flush, into the newest record
    assert [untimed(r) for r in of(recs, "eval")] == [
        {"type": "eval", "step": 4, "val_loss": 0.3, "val_acc": 0.75}
    ]
    end = recs[-1]
    assert end["type"] == "end" and end["status"] == "completed" and end["step"] == 4
    assert client.current() is None


def test_steps_follow_wandbs_rule(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run")
    run.log({"a": 1.0})  # step 0
    run.log({"b": 2.0}, commit=False)  # step 1, not committed
    run.log({"c": 3.0})  # still step 1
    run.log({"d": 4.0}, step=10)  # an explicit step moves the counter
    run.log({"e": 5.0})  # step 11
    run.finish()
    steps = [(r["step"], [k for k in r if len(k) == 1])
             for r in of(records(tmp_path / "run"), "train")]  # fmt: skip
    # b (not committed) and c share step 1: one record
    assert steps == [(0, ["a"]), (1, ["b", "c"]), (10, ["d"]), (11, ["e"])]


def test_eval_keys_and_values_that_are_not_numbers(tmp_path: Path) -> None:
    assert eval_name("val/acc") == "val_acc" and eval_name("eval_loss") == "val_loss"
    assert eval_name("val/top/1") == "val_top_1" and eval_name("loss") is None
    run = client.Run(tmp_path / "run")
    run.log({"loss": float("nan"), "note": "text", "image": object(), "ok": True})
    run.finish()
    recs = records(tmp_path / "run")
    train = of(recs, "train")[0]
    assert train["loss"] is None and train["ok"] == 1.0 and "note" not in train
    notes = [r["message"] for r in of(recs, "event") if r.get("kind") == "client"]
    assert len(notes) == 2 and "'note': it is a str" in notes[0]


def test_an_alert_with_action_stop_sets_should_stop(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run", alerts={"loss_spike": "stop"}, flush_every=1)
    for _ in range(8):
        run.log({"loss": 1.0})
    run.log({"loss": 50.0})
    run._flush(final=True)
    assert run.should_stop
    run.finish()
    alerts = [r for r in of(records(tmp_path / "run"), "event") if r.get("kind") == "alert"]
    assert alerts[0]["alert"] == "loss_spike" and alerts[0]["action"] == "stop"


def test_the_context_manager_records_the_exception(tmp_path: Path) -> None:
    with pytest.raises(ValueError), client.Run(tmp_path / "run") as run:
        run.log({"loss": 1.0})
        raise ValueError("bad batch at step 1")
    end = records(tmp_path / "run")[-1]
    assert end["status"] == "failed" and end["reason"] == "ValueError: bad batch at step 1"


def test_one_writer_per_run_dir(tmp_path: Path) -> None:
    from tuitrain.core.errors import UserError

    first = client.Run(tmp_path / "run")
    with pytest.raises(UserError, match="in use"):
        client.Run(tmp_path / "run")
    first.finish()
    client.Run(tmp_path / "run").finish()  # free again once finished


def test_define_metric_puts_keys_on_another_axis(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run")
    run.define_metric("val/*", step_metric="epoch")
    for _ in range(6):
        run.log({"loss": 1.0})
    run.log({"val/loss": 0.5, "epoch": 2})
    run.finish()
    evals = of(records(tmp_path / "run"), "eval")
    assert [untimed(r) for r in evals] == [{"type": "eval", "step": 2, "val_loss": 0.5}]


def test_the_wandb_module_keeps_configs_and_summaries(tmp_path: Path) -> None:
    import tuitrain.wandb as wandb

    wandb.init(project="p", name="n", config={"lr": 0.1}, dir=str(tmp_path))
    wandb.config.update({"batch": 8})
    wandb.config.width = 4
    assert wandb.config.lr == 0.1 and wandb.config["batch"] == 8 and wandb.run is not None
    wandb.log({"loss": 1.0})
    wandb.summary["best"] = 0.5
    run_dir = Path(wandb.run.dir)  # text, as wandb's
    wandb.finish()
    recs = records(run_dir)
    assert run_dir.parent == tmp_path
    assert recs[0]["config"]["meta"] == {"project": "p"} and "wandb" not in wandb.config
    assert [r["config"] for r in of(recs, "event") if r.get("kind") == "config"] == [
        {"batch": 8}, {"width": 4}]  # fmt: skip
    assert recs[-1]["summary"]["best"] == 0.5
    assert wandb.Image is not None  # unsupported: a no-op class


def test_the_process_tree_sampler_sees_a_child_and_its_memory() -> None:
    import subprocess
    import sys
    import time

    from tuitrain.client.proctree import TreeSampler, tree_pids

    code = "import subprocess, sys, time\nx = bytearray(150_000_000)\n"
    code += "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    code += "end = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        sampler = TreeSampler(proc.pid)
        deadline = time.monotonic() + 20
        while len(tree_pids(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        sampler.sample()
        time.sleep(1.0)
        sample = sampler.sample()
        assert sample.processes == 2  # the script and its child
        assert sample.rss_bytes is not None and sample.rss_bytes > 150_000_000
        # the busy loop: well above a sleeping process (~0%), whatever else the machine runs
        assert sample.cpu_pct is not None and sample.cpu_pct > 5
        assert "2 processes" in sample.text() and "RSS" in sample.text()
    finally:
        for pid in tree_pids(proc.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        proc.wait()
