"""Hostile input, round 4, the client's classes: it never loses what it was given (every row
reaches the file or is counted), never grows without bound, one bad value costs one value,
options are checked at init, a forked child never touches its parent's run, finish undoes
init, a name is never a field, records keep within the contract's limits, and the end
record says how the script ended."""

from __future__ import annotations

import fractions
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tuitrain
from tuitrain.client import core as client
from tuitrain.core.errors import UserError
from tuitrain.metrics.records import (
    CONTRACT_FIELDS,
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    STEP_MAX,
    user_field,
)
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower

ROOT = Path(__file__).resolve().parents[2]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]


def of(recs: list[dict], kind: str) -> list[dict]:
    return [r for r in recs if r["type"] == kind]


def warnings_of(recs: list[dict]) -> list[str]:
    return [r["message"] for r in of(recs, "event") if r.get("kind") == "client"]


# ------------------------------------------------------------------ 1. nothing lost, bounded


def test_finish_waits_for_a_flush_being_converted(tmp_path: Path, monkeypatch: Any) -> None:
    inside, release = threading.Event(), threading.Event()
    real = client.Run._records

    def slow(self: client.Run, rows: list) -> list:
        if threading.current_thread().name == "tuitrain-flush" and not release.is_set():
            inside.set()
            release.wait(30)
        return real(self, rows)

    monkeypatch.setattr(client.Run, "_records", slow)
    run = client.Run(tmp_path / "run", flush_every=10)
    for step in range(10):
        run.log({"loss": float(step)})
    assert inside.wait(30)  # the flush thread is converting those ten rows
    done = threading.Thread(target=run.finish)
    done.start()
    done.join(0.3)
    assert done.is_alive()  # finish waits for the flush: it does not close the sink under it
    release.set()
    done.join(30)
    recs = records(tmp_path / "run")
    assert [r["step"] for r in of(recs, "train")] == list(range(10))
    assert recs[-1]["type"] == "end" and "dropped_rows" not in recs[-1]


def test_a_full_queue_waits_then_drops_and_counts(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(client, "FULL_WAIT_S", 0.01)
    inside, release = threading.Event(), threading.Event()
    real = client.Run._records
    seen: list[int] = []

    def stuck(self: client.Run, rows: list) -> list:
        if threading.current_thread().name == "tuitrain-flush" and not release.is_set():
            inside.set()
            release.wait(30)
        return real(self, rows)

    monkeypatch.setattr(client.Run, "_records", stuck)
    run = client.Run(tmp_path / "run", flush_every=5)
    run.max_pending = 20
    for step in range(5):
        run.log({"x": float(step)})
    assert inside.wait(30)  # the flush thread holds 5 rows and cannot take more
    for step in range(5, 200):
        run.log({"x": float(step)})
        seen.append(run._pending_values)
    assert max(seen) <= 20  # bounded, however fast the loop logs
    release.set()
    run.finish()
    recs = records(tmp_path / "run")
    written = len(of(recs, "train"))
    end = recs[-1]
    assert end["dropped_rows"] == run.dropped_rows > 0
    assert written + end["dropped_rows"] == 200  # every row is in the file or counted
    assert any("log calls were dropped" in m for m in warnings_of(recs))


def test_a_fast_loop_loses_nothing_when_the_writer_keeps_up(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run", flush_every=50)
    run.max_pending = 64  # a small queue: log() waits for the flush thread instead of growing
    for step in range(5000):
        run.log({"x": float(step)})
        assert run._pending_values <= 64
    run.finish()
    recs = records(tmp_path / "run")
    assert len(of(recs, "train")) + recs[-1].get("dropped_rows", 0) == 5000


class NoStack(torch.Tensor):
    """A tensor subclass that refuses to be stacked (an odd value from a library)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.stack:
            raise RuntimeError("this tensor cannot be stacked")
        return super().__torch_function__(func, types, args, kwargs or {})


class BadItem:
    def item(self) -> float:
        raise ValueError("no")


def test_one_bad_value_costs_that_value_only(tmp_path: Path) -> None:
    good: dict[str, Any] = {
        "f": 1.5,
        "i": 3,
        "b": True,
        "np32": np.float32(2.5),
        "np64": np.int64(7),
        "np0d": np.array(4.0),
        "np1": np.array([5.0]),
        "frac": fractions.Fraction(1, 4),
        "t": torch.tensor(6.0),
        "t1": torch.tensor([8.0]),
        "half": torch.tensor(0.5, dtype=torch.float16),
        "int_t": torch.tensor(9),
        "odd": torch.tensor(10.0).as_subclass(NoStack),  # the stack fails: read one by one
        "huge": 10**400,  # beyond a float: infinite, written as null
    }
    bad: dict[str, Any] = {
        "text": "x",
        "none": None,
        "complex_t": torch.tensor(1 + 2j),
        "many": torch.ones(3),
        "meta": torch.empty((), device="meta"),
        "np_many": np.ones(2),
        "complex": 1j,
        "bad_item": BadItem(),
        "list": [1.0],
        "k" * 300: 1.0,  # a key longer than any metric name
    }
    run = client.Run(tmp_path / "run")
    run.log({**good, **bad})
    run.log({"after": 1.0})
    run.finish()  # never raises out of the script
    recs = records(tmp_path / "run")
    train = of(recs, "train")[0]
    want = {"f": 1.5, "i": 3.0, "b": 1.0, "np32": 2.5, "np64": 7.0, "np0d": 4.0, "np1": 5.0,
            "frac": 0.25, "t": 6.0, "t1": 8.0, "half": 0.5, "int_t": 9.0, "odd": 10.0,
            "huge": None}  # fmt: skip
    assert {k: train[k] for k in want} == want
    assert not set(bad) & set(train)
    assert of(recs, "train")[1]["after"] == 1.0  # the next flush is unharmed
    said = warnings_of(recs)
    assert len(said) == len(bad) and all("left out and counted" in m for m in said)
    assert recs[-1]["status"] == "completed" and recs[-1]["dropped_values"] == len(bad)


def test_dtensors_replicated_are_read_and_partial_ones_cost_one_value(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        replicated = distribute_tensor(torch.tensor(2.0), mesh, [Replicate()])
        partial = DTensor.from_local(torch.tensor(3.0), mesh, [Partial()])
        run = client.Run(tmp_path / "run")
        run.log({"grad_norm": replicated, "partial_norm": partial, "loss": 1.0})
        run.finish()
    finally:
        dist.destroy_process_group()
    recs = records(tmp_path / "run")
    train = of(recs, "train")[0]
    assert train["grad_norm"] == 2.0 and train["loss"] == 1.0 and "partial_norm" not in train
    assert any("DTensor" in m and "full_tensor" in m for m in warnings_of(recs))


@pytest.mark.parametrize(
    ("alerts", "rule", "value"),
    [
        ({"loss_spike_factor": "5"}, "loss_spike_factor", 5),
        ({"loss_spike_factor": " 2.5 "}, "loss_spike_factor", 2.5),
        ({"memory_creep_intervals": "4"}, "memory_creep_intervals", 4),
        ({"loss_spike": "stop"}, "loss_spike", "stop"),
        ({"loss_spike": "pause"}, "loss_spike", "warn"),  # nothing to pause in a foreign loop
    ],
)
def test_alert_options_given_as_text_are_read(
    tmp_path: Path, alerts: dict, rule: str, value: Any
) -> None:
    run = client.Run(tmp_path / "run", alerts=alerts)
    for step in range(30):
        run.log({"loss": 1.0 + (step == 25) * 50})
    run.finish()
    assert run.rules.cfg[rule] == value
    assert not [m for m in warnings_of(records(tmp_path / "run")) if "flush" in m]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"alerts": {"loss_spike_factor": "five"}}, "loss_spike_factor"),
        ({"alerts": {"loss_spike_factor": "-1"}}, "out of range"),
        ({"alerts": {"loss_spike": "explode"}}, "choose one of"),
        ({"alerts": {"loss_spik": "warn"}}, "did you mean"),
        ({"alerts": ["loss_spike"]}, "table of rules"),
        ({"flush_every": 0}, "flush_every"),
        ({"flush_s": "soon"}, "flush_s"),
    ],
)
def test_bad_options_are_one_sentence_at_init(tmp_path: Path, options: dict, words: str) -> None:
    with pytest.raises(UserError, match=words) as caught:
        client.Run(tmp_path / "run", **options)
    assert "\n" not in str(caught.value)
    client.Run(tmp_path / "run").finish()  # nothing was held: the dir takes a run


class Exits:
    """atexit as the client uses it, recorded (CPython's own count never goes down)."""

    def __init__(self) -> None:
        self.live: list[Any] = []

    def register(self, func: Any) -> None:
        self.live.append(func)

    def unregister(self, func: Any) -> None:
        self.live = [f for f in self.live if f != func]


def test_finish_undoes_what_init_did(tmp_path: Path, monkeypatch: Any) -> None:
    exits = Exits()
    monkeypatch.setattr(client, "atexit", exits)
    before = (sys.excepthook, sys.exit)
    for trial in range(60):  # a sweep in one process: nothing stacks up
        run = tuitrain.init(tmp_path / f"t{trial}", config={"trial": trial})
        assert sys.excepthook is not before[0] and len(exits.live) == 1
        run.log({"loss": 1.0 / (trial + 1)})
        if trial % 2:
            run.finish()  # the other half are finished by the next init
    tuitrain.finish()
    assert (sys.excepthook, sys.exit) == before and exits.live == []


@pytest.mark.slow
def test_a_sweep_of_1200_trials_in_one_process(tmp_path: Path) -> None:
    rc, recs, err = run_script(
        tmp_path,
        """
        import tuitrain
        for trial in range(1200):
            run = tuitrain.init("run" if trial == 1199 else f"t/{trial}", flush_s=60)
            run.log({"loss": 1.0})
            run.finish()
        raise ValueError("the last trial's exception reaches the excepthook")
        """,
    )
    assert rc == 1 and "RecursionError" not in err and "the last trial's" in err
    assert recs[-1]["status"] == "completed"  # finished before the exception


@pytest.mark.parametrize(
    ("step", "kept"),
    [
        (2**63, False),
        (2**64 + 5, False),
        (-1, False),
        (2.5, False),
        (float("nan"), False),
        ("7", False),
        (STEP_MAX, True),
        (np.int64(12), True),
        (3.0, True),
        (torch.tensor(4), True),
    ],
)
def test_a_step_is_an_int64_every_reader_can_place(tmp_path: Path, step: Any, kept: bool) -> None:
    run = client.Run(tmp_path / "run")
    run.log({"a": 1.0}, step=step)
    run.finish()
    recs = records(tmp_path / "run")
    trains = of(recs, "train")
    assert len(trains) == int(kept)
    if kept:
        assert trains[0]["step"] == int(step)
    else:
        assert recs[-1]["dropped_rows"] == 1
        assert any("not a whole number" in m for m in warnings_of(recs))
    store = MetricStore()  # what watch reads: every written step placed
    JsonlFollower(tmp_path / "run" / "metrics.jsonl", store).poll()
    assert store.snapshot().end is not None


# ------------------------------------------------------------------ 2. a name is never a field

ALIASES = {"loss", "lr", "epoch", "grad_norm"}


def test_no_logged_name_replaces_a_contract_field(tmp_path: Path) -> None:
    names = sorted(CONTRACT_FIELDS - ALIASES)
    run = client.Run(tmp_path / "run")
    run.log({name: 1000.0 + i for i, name in enumerate(names)} | {"loss": 0.5})
    run.log({"loss": 0.4, "mfu": 45.0})  # nanoGPT's mfu, in percent
    run.finish()
    recs = records(tmp_path / "run")
    first, second = of(recs, "train")
    assert first["type"] == "train" and first["step"] == 0 and first["loss"] == 0.5
    for i, name in enumerate(names):
        assert first[user_field(name)] == 1000.0 + i  # the user's value, under its own name
        assert first.get(name) != 1000.0 + i  # the contract's field is not the user's
    assert second["user/mfu"] == 45.0 and second.get("mfu") is None
    store = MetricStore()
    JsonlFollower(tmp_path / "run" / "metrics.jsonl", store).poll()
    snap = store.snapshot()
    assert "user/mfu" in snap.series and len(snap.series["loss"].ys) == 2


def test_a_record_of_type_3_stays_a_train_record(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run")
    for step in range(3):
        run.log({"type": 3, "step": 99, "loss": 1.0 - step / 10})
    run.finish()
    trains = of(records(tmp_path / "run"), "train")
    assert [r["step"] for r in trains] == [0, 1, 2] and all(r["user/type"] == 3 for r in trains)


# ------------------------------------------------------------------ 6. the contract's limits


def test_a_record_over_the_line_size_is_cut_and_counted(tmp_path: Path) -> None:
    run = client.Run(tmp_path / "run")
    norms = {f"norm/layer{i:05d}.weight.with.a.long.name": float(i) for i in range(6000)}
    run.log({"loss": 1.0, **norms})
    run.log({"loss": 0.9, **dict(list(norms.items())[:1000])})  # 1,000 norms: ~60 KB, whole
    run.finish()
    lines = (tmp_path / "run" / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert all(len(line) <= MAX_RECORD_BYTES for line in lines[1:])
    recs = records(tmp_path / "run")
    big, whole = of(recs, "train")
    assert big["loss"] == 1.0 and big["step"] == 0 and big["dropped_fields"] > 0
    assert len([k for k in big if k.startswith("norm/")]) + big["dropped_fields"] == 6000
    assert (
        "dropped_fields" not in whole and len([k for k in whole if k.startswith("norm/")]) == 1000
    )
    assert recs[-1]["dropped_values"] == big["dropped_fields"]
    assert any("256 KiB" in m for m in warnings_of(recs))


def test_a_config_too_big_for_the_header_goes_whole_to_config_json(tmp_path: Path) -> None:
    config = {f"key{i}": "v" * 1000 for i in range(2000)}  # 2 MB
    run = client.Run(tmp_path / "run", config=config)
    run.update_config({f"more{i}": "w" * 1000 for i in range(500)})  # 500 KB: over one record
    run.log({"loss": 1.0})
    run.finish()
    lines = (tmp_path / "run" / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines[0]) <= MAX_HEADER_BYTES and all(len(x) <= MAX_RECORD_BYTES for x in lines)
    header = json.loads(lines[0])
    assert header["config"] == {"script": {"config_file": "config.json"}}
    whole = json.loads((tmp_path / "run" / "config.json").read_text())
    assert len(whole) == 2500 and whole["key1999"] == "v" * 1000
    assert any(r.get("kind") == "config" and "config.json" in r["message"]
               for r in records(tmp_path / "run"))  # fmt: skip


# ------------------------------------------------------------------ 1 and 7, as processes


def run_script(tmp_path: Path, body: str) -> tuple[int, list[dict], str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, records(tmp_path / "run"), proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ending", "code", "status"),
    [
        ("sys.exit(4)", 4, "failed"),
        ("sys.exit('bad config')", 1, "failed"),
        ("sys.exit(0)", 0, "completed"),
        ("pass", 0, "completed"),
        ("raise ValueError('boom')", 1, "failed"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 143, "stopped"),
        ("with tuitrain.init('run2') as r2:\n    raise SystemExit(3)", 3, "failed"),
    ],
)
def test_the_end_record_says_how_the_script_ended(
    tmp_path: Path, ending: str, code: int, status: str
) -> None:
    rc, recs, err = run_script(
        tmp_path,
        "import sys, tuitrain\nrun = tuitrain.init('run')\n"
        "for s in range(3):\n    run.log({'loss': 1.0 / (s + 1)})\n" + ending + "\n",
    )
    assert rc == code, err
    end = recs[-1] if "run2" not in ending else records(tmp_path / "run2")[-1]
    assert end["type"] == "end" and end["status"] == status and end["exit_code"] == code
    if "run2" not in ending:
        assert end["step"] == 2  # the last step it saw


@pytest.mark.slow
def test_a_forked_child_never_touches_its_parents_run(tmp_path: Path) -> None:
    rc, recs, err = run_script(
        tmp_path,
        """
        import os, sys, tuitrain
        run = tuitrain.init("run")
        run.log({"loss": 1.0})
        pid = os.fork()
        if pid == 0:  # a helper process: it logs, then leaves through sys.exit and atexit
            run.log({"loss": 99.0})
            tuitrain.log({"child": 1.0})
            sys.exit(0)
        os.waitpid(pid, 0)
        run.log({"loss": 0.5})
        run.finish()
        """,
    )
    assert rc == 0, err
    assert [r["type"] for r in recs].count("end") == 1 and recs[-1]["status"] == "completed"
    assert [r["loss"] for r in of(recs, "train")] == [1.0, 0.5]
    assert not any("child" in r for r in recs)


@pytest.mark.slow
def test_lightning_says_interrupt_and_exception_apart(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    rc, stopped, err = run_script(
        tmp_path,
        """
        import torch, lightning as L
        from tuitrain.lightning import TuitrainLogger

        class M(L.LightningModule):
            def __init__(self, exc):
                super().__init__()
                self.net, self.exc = torch.nn.Linear(2, 1), exc
            def training_step(self, batch, i):
                if i == 3:
                    raise self.exc
                self.log("loss_x", self.net(batch[0]).mean())
                return self.net(batch[0]).pow(2).mean()
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        def fit(exc, run_dir):
            data = torch.utils.data.TensorDataset(torch.randn(64, 2))
            trainer = L.Trainer(max_epochs=1, logger=TuitrainLogger(run_dir=run_dir),
                                log_every_n_steps=1, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                accelerator="cpu")
            trainer.fit(M(exc), torch.utils.data.DataLoader(data, batch_size=8))

        try:
            fit(ValueError("the data is bad"), "failed")
        except ValueError:
            pass
        fit(KeyboardInterrupt(), "run")  # Lightning ends the process: sys.exit(1)
        """,
    )
    failed = records(tmp_path / "failed")
    assert failed[-1]["status"] == "failed", err
    assert failed[-1]["reason"] == "ValueError: the data is bad"
    assert rc == 1 and stopped[-1]["status"] == "stopped", err
    assert "SIGINT" in stopped[-1]["reason"]


def test_tuitrain_runs_dir_wins_over_the_scripts_own(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("TUITRAIN_RUN_DIR", str(tmp_path / "owned"))
    run = client.Run(tmp_path / "elsewhere")  # as a Lightning or HF example may pass
    run.log({"loss": 1.0})
    run.finish()
    assert not (tmp_path / "elsewhere").exists()
    recs = records(tmp_path / "owned")
    assert of(recs, "train")[0]["loss"] == 1.0
    assert any("elsewhere" in m and "TUITRAIN_RUN_DIR" in m for m in warnings_of(recs))
