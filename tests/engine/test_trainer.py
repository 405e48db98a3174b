"""The engine on CPU in all three precisions, against the metric contract of DESIGN.md."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest
import torch

from tuitrain.core.config import OptimConfig
from tuitrain.engine import Control, run
from tuitrain.engine import precision as precision_mod
from tuitrain.engine.device import bf16_supported
from tuitrain.engine.precision import (
    BF16Precision,
    FP16Precision,
    make_precision,
    resolve_precision,
)
from tuitrain.engine.setup import make_schedule
from tuitrain.metrics import MetricStore, StoreSink

TRAIN_FIELDS = [
    "type",
    "time",
    "step",
    "epoch",
    "samples",
    "loss",
    "lr",
    "samples_per_s",
    "step_time_s",
    "data_wait_s",
    "data_wait_frac",
    "mem_alloc_bytes",
    "mem_reserved_bytes",
    "mem_peak_bytes",
    "host_rss_bytes",
    "gpu_util_pct",
    "gpu_mem_used_bytes",
    "grad_scale",
    "skipped_steps",
    "grad_norm",
    "tflops",
    "mfu",
    "host_syncs",
    "syncs_per_step",
    "monitor_s",
    "monitor_frac",
]
HEADER_FIELDS = [
    "preset",
    "config",
    "device",
    "device_name",
    "precision",
    "compile",
    "world_size",
    "torch",
    "tuitrain",
    "python",
    "time",
]


class ListSink(StoreSink):
    """Keeps every record in order, and feeds a store like the UI's."""

    def __init__(self) -> None:
        super().__init__(MetricStore())
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(dict(record))
        super().write(record)

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["type"] == kind]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_runs_in_each_precision(tiny_config, precision: str) -> None:
    steps = 8 if precision == "fp32" else 4  # autocast is emulated (slow) on most CPUs
    cfg = tiny_config(f"train.precision={precision}", f"train.max_steps={steps}")
    sink = ListSink()
    result = run(cfg, sink)
    assert result.status == "completed" and result.exit_code == 0
    assert result.step == steps
    header = sink.of("header")[0]
    assert list(header)[0] == "type"
    assert all(k in header for k in HEADER_FIELDS)
    assert header["precision"] == precision and header["device"] == "cpu"
    trains = sink.of("train")
    assert [r["step"] for r in trains] == list(range(2, steps + 1, 2))
    for rec in trains:
        assert list(rec) == TRAIN_FIELDS
        assert math.isfinite(rec["loss"]) and rec["samples_per_s"] > 0
        # CPU: no CUDA allocator or NVML numbers, never fake ones; host RSS always.
        assert rec["mem_alloc_bytes"] is None and rec["gpu_util_pct"] is None
        assert rec["host_rss_bytes"] > 10 * 2**20
        assert 0 <= rec["data_wait_frac"] <= 1 and rec["grad_norm"] > 0
        if precision == "fp16":
            assert rec["grad_scale"] is not None and rec["grad_scale"] >= 1.0
            assert rec["skipped_steps"] is not None
        else:
            assert rec["grad_scale"] is None and rec["skipped_steps"] is None
    assert trains[-1]["samples"] == steps * 256
    end = sink.of("end")[0]
    assert end["status"] == "completed" and end["step"] == steps
    assert sink.records[-1] is not None and sink.records[-1]["type"] == "end"
    evals = sink.of("eval")
    assert len(evals) == steps // 2  # 512 images = 2 steps per epoch, one eval each
    assert all(0.0 <= e["val_acc"] <= 1.0 for e in evals)


def test_precision_modes_really_change_dtypes() -> None:
    cpu = torch.device("cpu")
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    with make_precision("bf16", cpu).autocast():
        assert layer(x).dtype == torch.bfloat16
    with make_precision("fp16", cpu).autocast():
        assert layer(x).dtype == torch.float16
    with make_precision("fp32", cpu).autocast():
        assert layer(x).dtype == torch.float32
    native = bf16_supported(cpu)  # AVX512-BF16 or AMX: this machine's answer, either way
    assert make_precision("auto", cpu).name == ("bf16" if native else "fp32")
    assert isinstance(make_precision("fp16", cpu), FP16Precision)


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_follows_native_bf16(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """Both branches on any machine: auto is bf16 only where bf16 is native (never emulated),
    else fp16 on CUDA (with its GradScaler) and fp32 on a CPU."""
    monkeypatch.setattr(precision_mod, "bf16_supported", lambda device: native)
    assert resolve_precision("auto", torch.device("cpu")) == ("bf16" if native else "fp32")
    assert resolve_precision("auto", torch.device("cuda", 0)) == ("bf16" if native else "fp16")
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"  # asked for: it runs


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_emulated_bf16_says_so(monkeypatch: pytest.MonkeyPatch, device_type: str) -> None:
    device = torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu")
    monkeypatch.setattr(precision_mod, "device_name", lambda device: "Tesla T4")
    monkeypatch.setattr(precision_mod, "bf16_supported", lambda device: False)
    warning = BF16Precision(device).start_warning()
    assert warning is not None and "emulated" in warning[0]
    fix = "--precision fp16" if device_type == "cuda" else "--precision fp32"
    assert fix in warning[1], warning
    if device_type == "cuda":
        assert "Tesla T4" in warning[0]
    monkeypatch.setattr(precision_mod, "bf16_supported", lambda device: True)
    assert BF16Precision(device).start_warning() is None


def test_training_learns(tiny_config) -> None:
    """Two epochs on 512 images must beat chance by far and lower the loss."""
    sink = ListSink()
    result = run(tiny_config("train.epochs=3", "data.train_samples=1024"), sink)
    losses = [r["loss"] for r in sink.of("train")]
    assert losses[-1] < losses[0] * 0.7
    acc = result.val_metrics.get("val_acc")
    assert acc is not None and acc > 0.6
    assert len(sink.of("eval")) == 3  # one per epoch


def test_label_smoothing_bounds_the_train_loss_not_the_val_loss(tiny_config) -> None:
    """With smoothing 0.5 over 10 classes no prediction can bring the training loss below the
    entropy of the smoothed target (1.68); the plain run goes below it, and the val loss of
    both stays plain cross-entropy."""
    eps, k = 0.5, 10
    on, off = 1 - eps + eps / k, eps / k
    floor = -(on * math.log(on) + (k - 1) * off * math.log(off))
    runs = {}
    for smoothing in (0.0, eps):
        sink = ListSink()
        cfg = tiny_config("train.epochs=2", "data.train_samples=1024", "train.log_every=1")
        cfg.train.label_smoothing = smoothing
        run(cfg, sink)
        runs[smoothing] = sink
    assert min(r["loss"] for r in runs[0.0].of("train")) < floor - 0.3
    assert min(r["loss"] for r in runs[eps].of("train")) > floor - 1e-4
    # plain cross-entropy on the val set: a model trained to predict 0.55 scores well under
    # the smoothed floor on the images it gets right
    assert runs[eps].of("eval")[-1]["val_loss"] < floor


def test_grad_accumulation_counts_optimizer_steps(tiny_config) -> None:
    sink = ListSink()
    result = run(tiny_config("optim.grad_accum=2", "train.epochs=1"), sink)
    # 512 samples / 256 per micro-batch = 2 micro-batches = 1 optimizer step per epoch
    assert result.step == 1
    assert sink.of("header")[0]["global_batch"] == 512
    assert sink.of("end")[0]["samples"] == 512


def test_max_steps_wins_over_epochs(tiny_config) -> None:
    result = run(tiny_config("train.epochs=5", "train.max_steps=3"), ListSink())
    assert result.step == 3 and result.status == "completed"


def test_sgd_warmup_and_clipping(tiny_config) -> None:
    sink = ListSink()
    cfg = tiny_config(
        "optim.name=sgd",
        "optim.warmup_steps=4",
        "optim.grad_clip=0.5",
        "train.max_steps=8",
        "train.log_every=1",
        "train.precision=fp32",
    )
    run(cfg, sink)
    lrs = [r["lr"] for r in sink.of("train")]
    # the rate each step used: linear warmup over 4 steps, then cosine down
    assert lrs[:4] == pytest.approx([cfg.optim.lr * k / 4 for k in (1, 2, 3, 4)])
    assert lrs[4:] == sorted(lrs[4:], reverse=True) and lrs[-1] < cfg.optim.lr / 2


def test_nan_loss_stops_with_step_number(tiny_config) -> None:
    sink = ListSink()
    cfg = tiny_config("model.name=tests.engine.models_for_tests:nan_model", "train.max_steps=6")
    result = run(cfg, sink)
    assert result.status == "failed" and result.exit_code == 1
    assert "at step 3" in result.reason and "before the optimizer step" in result.reason
    errors = [e for e in sink.of("event") if e["level"] == "error"]
    assert errors and "lower optim.lr" in errors[0]["message"]
    assert sink.of("end")[0]["status"] == "failed"


def test_user_model_factory(tiny_config) -> None:
    sink = ListSink()
    cfg = tiny_config("model.name=tests.engine.models_for_tests:tiny_mlp", "train.max_steps=2")
    assert run(cfg, sink).status == "completed"
    assert sink.of("header")[0]["params"] == 784 * 32 + 32 + 32 * 10 + 10
    bad = run(tiny_config("model.name=tests.engine.models_for_tests:not_a_model"), ListSink())
    assert bad.exit_code == 2 and "not an nn.Module" in bad.reason


def test_stop_and_pause_from_another_thread(tiny_config) -> None:
    control = Control()
    store_sink = ListSink()
    cfg = tiny_config("train.epochs=50", "train.pace_s=0.02", "train.log_every=1")
    results = []
    worker = threading.Thread(target=lambda: results.append(run(cfg, store_sink, control)))
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not store_sink.of("train") and time.monotonic() < deadline:
            time.sleep(0.02)
        control.pause()
        # the engine pauses at the next step boundary (a step may take long on a busy CPU)
        while control.state != "paused" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert control.state == "paused"
        paused_at = len(store_sink.of("train"))
        time.sleep(0.5)
        assert len(store_sink.of("train")) == paused_at, "steps advanced while paused"
        assert control.state == "paused"
        control.resume()
        while len(store_sink.of("train")) <= paused_at and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(store_sink.of("train")) > paused_at, "no step after resume"
    finally:
        control.request_stop("test stop")
        worker.join(timeout=30)
    assert not worker.is_alive()
    assert results[0].status == "stopped" and results[0].reason == "test stop"
    assert store_sink.of("end")[0]["status"] == "stopped"
    # the pause and resume events carry the step they name (the event log's step column)
    for kind in ("pause", "resume"):
        event = next(e for e in store_sink.of("event") if e.get("kind") == kind)
        assert event["message"].endswith(f"at step {event['step']}"), event


def test_profile_steps_writes_top_table(tiny_config, tmp_path: Path) -> None:
    sink = ListSink()
    run(tiny_config("train.max_steps=4", "train.profile_steps=2"), sink, run_dir=tmp_path)
    files = list(tmp_path.glob("profile-step*.txt"))
    assert len(files) == 1
    table = files[0].read_text()
    assert "Self CPU" in table and "aten::" in table
    assert [e for e in sink.of("event") if e.get("kind") == "profile"]


def test_profile_steps_writes_a_trace_after_a_warm_up(tiny_config, tmp_path: Path) -> None:
    """--profile-steps 3: one warm-up step, then 3 counted steps; the table and a Chrome/
    Perfetto trace of the counted steps (the model's ops in it) lie side by side."""
    sink = ListSink()
    run(tiny_config("train.max_steps=6", "train.profile_steps=3"), sink, run_dir=tmp_path)
    # requested before step 2 (never the first step): step 2 warms up, steps 3-5 counted
    table_path = tmp_path / "profile-step3.txt"
    trace_path = tmp_path / "profile-step3.trace.json"
    assert "aten::" in table_path.read_text()
    trace = json.loads(trace_path.read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::conv2d" in names or "aten::addmm" in names
    steps = {n for n in names if isinstance(n, str) and n.startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"}  # not the warm-up
    (profile,) = [e for e in sink.of("event") if e.get("kind") == "profile"]
    assert profile["trace"] == str(trace_path) and str(trace_path) in profile["message"]
    assert not list(tmp_path.glob(".*tmp-*"))  # the temp file was renamed, not left


def test_profile_cut_short_by_the_end_reports_what_it_has(tiny_config, tmp_path: Path) -> None:
    """f pressed near the end (20 steps asked, 3 left): the table of the steps profiled comes
    out before the end record, not nothing."""
    sink = ListSink()
    run(tiny_config("train.max_steps=4", "train.profile_steps=20"), sink, run_dir=tmp_path)
    profiles = [e for e in sink.of("event") if e.get("kind") == "profile"]
    assert len(profiles) == 1 and "aten::" in profiles[0]["table"]
    # started before step 2: step 2 is the warm-up, steps 3 and 4 are counted
    assert "the run ended after 2 of the 20 steps" in profiles[0]["message"]
    assert len(list(tmp_path.glob("profile-step*.txt"))) == 1
    kinds = [r["type"] for r in sink.records]
    assert kinds.index("end") > sink.records.index(profiles[0])


@pytest.mark.slow
def test_compile_reports_its_time_outside_throughput(tiny_config) -> None:
    from torch._dynamo.utils import counters

    graphs: dict[str, int] = {}

    class GraphCounter(ListSink):
        """Counts the graphs dynamo compiled when the compile ends and when eval is done."""

        def write(self, record: dict) -> None:
            if record.get("kind") == "compile_done" or record["type"] == "eval":
                graphs[record.get("kind") or "eval"] = counters["stats"]["unique_graphs"]
            super().write(record)

    sink = GraphCounter()
    cfg = tiny_config("train.compile=on", "train.max_steps=4", "train.precision=bf16")
    result = run(cfg, sink)
    assert result.status == "completed"
    assert sink.of("header")[0]["compile"] is True
    done = [e for e in sink.of("event") if e.get("kind") == "compile_done"]
    assert len(done) == 1 and done[0]["seconds"] > 1.0
    # the final evaluation runs the plain module: no second (eval-mode) compile, unseen
    assert sink.of("eval") and graphs["eval"] == graphs["compile_done"] > 0, graphs
    # throughput intervals start after the compile step, so no interval includes it
    steps_per_s = [r["samples_per_s"] / 256 for r in sink.of("train")]
    assert all(1 / s < done[0]["seconds"] for s in steps_per_s)


@pytest.mark.slow
def test_engine_and_metrics_import_without_textual() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tuitrain.engine, tuitrain.metrics, tuitrain.engine.runner;"
        "bad = [m for m in ('textual', 'rich', 'plotext') if m in sys.modules];"
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
def test_schedules_warm_up_then_decay_to_the_floor(schedule: str) -> None:
    cfg = OptimConfig(lr=1.0, schedule=schedule, warmup_steps=10, min_lr_ratio=0.1)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    sched = make_schedule(opt, cfg, total_steps=110)
    rates = []
    for _ in range(110):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[:10] == pytest.approx([k / 10 for k in range(1, 11)])  # linear warmup
    after = rates[10:]
    if schedule == "constant":
        assert after == pytest.approx([1.0] * 100)
        return
    assert after[0] == pytest.approx(1.0) and after == sorted(after, reverse=True)
    # halfway through the decay: cosine and linear both sit at the middle of lr and the floor
    assert after[50] == pytest.approx(0.55)
    quarter = 0.1 + 0.9 * (0.75 if schedule == "linear" else (1 + math.cos(math.pi / 4)) / 2)
    assert after[25] == pytest.approx(quarter)
    assert 0.1 <= after[-1] < 0.12  # reaches the floor at the last step


def test_a_long_log_interval_shows_a_sign_of_life(
    tiny_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between log points that are far apart the engine writes `progress` events (steps done,
    seconds a step), so a slow first interval does not read as a hang; at a log point the
    clock starts again. The quiet bound is shrunk here; 10 s in a run."""
    from tuitrain.engine import trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "PROGRESS_EVERY_S", 0.0)  # after every quiet step
    sink = ListSink()
    result = run(tiny_config("train.max_steps=6", "train.log_every=3"), sink)
    assert result.step == 6
    progress = [r for r in sink.of("event") if r.get("kind") == "progress"]
    logged = [r["step"] for r in sink.of("train")]
    assert logged == [3, 6]
    steps = [r["step"] for r in progress]
    assert steps and set(steps).isdisjoint(logged)  # only between log points
    assert steps == sorted(steps) and all(1 <= s <= 5 for s in steps)
    assert all(r["step_time_s"] > 0 for r in progress)
    for r in progress:  # before the first log point: none yet; after it: which step it was
        said = "no log point yet" if r["step"] < 3 else "last log point at step 3"
        assert said in r["message"], r["message"]
