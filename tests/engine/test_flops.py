"""FLOPs per sample, achieved TFLOP/s and MFU, and what the monitor costs (issue #15)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.engine.test_trainer import ListSink
from tuitrain.engine import run
from tuitrain.engine.flops import count_flops_per_sample, measure_peak, peak_dtype, table_peak
from tuitrain.engine.models.vision import FashionCNN
from tuitrain.engine.tasks.classify import ClassifyTask
from tuitrain.metrics.format import format_train_line

CPU = torch.device("cpu")


def classify_flops(model: nn.Module, batch: int = 2) -> float | None:
    """The count on the classify task's training step over `batch` zero images: the step
    every task's FLOPs come from (the dry step counts it on the first validation batch)."""
    x = torch.zeros((batch, 1, 28, 28))
    y = torch.zeros(batch, dtype=torch.long)
    task = ClassifyTask()
    return count_flops_per_sample(model, lambda m: task.training_step(m, (x, y)), batch, CPU)


def conv(cin: int, cout: int, k: int, hout: int, wout: int) -> int:
    return 2 * cin * cout * k * k * hout * wout  # a multiply-add is two FLOPs


def linear(n_in: int, n_out: int) -> int:
    return 2 * n_in * n_out


def test_flop_count_of_the_seeds_cnn_matches_a_hand_count() -> None:
    """By hand from the layer shapes: forward conv 1x28x28 -> 32 (3x3, same), pool, conv
    32 -> 64 at 14x14, pool, linear 3136 -> 256 -> 10. Backward is twice the forward (the
    input gradient and the weight gradient), except that the first layer needs no input
    gradient (the images take none): 3 x forward minus the first conv once."""
    first = conv(1, 32, 3, 28, 28)
    forward = first + conv(32, 64, 3, 14, 14) + linear(64 * 7 * 7, 256) + linear(256, 10)
    by_hand = 3 * forward - first
    counted = classify_flops(FashionCNN())
    assert counted is not None
    assert counted == pytest.approx(by_hand, rel=0.03)
    assert counted == pytest.approx(27.4e6, rel=0.01)  # about 27 MFLOP per training sample


class WithNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
            nn.Dropout(0.5), nn.Linear(4 * 26 * 26, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_the_count_leaves_rng_gradients_and_batch_norm_statistics_alone() -> None:
    """A forward in train mode draws dropout masks and moves batch-norm statistics; the
    count puts both back, and leaves no gradient behind (exact resume depends on it)."""
    torch.manual_seed(3)
    model = WithNorm().train()
    with torch.no_grad():
        model.net[1].running_mean.fill_(0.25)  # not what a batch of zeros would give
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    rng = torch.get_rng_state()
    flops = classify_flops(model, batch=4)
    assert flops is not None and flops > 0
    assert torch.equal(torch.get_rng_state(), rng)
    for name, value in model.named_buffers():
        assert torch.equal(value, buffers[name]), name
    assert all(p.grad is None for p in model.parameters())
    assert model.training


def test_a_model_the_counter_cannot_follow_gives_none() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("no")

    assert classify_flops(Broken()) is None


@pytest.mark.parametrize(
    ("name", "dtype", "peak"),
    [
        ("NVIDIA H200", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A10", "fp16", 125.0),  # not the A100's
        ("NVIDIA L40S", "bf16", 362.1),
        ("NVIDIA L4", "bf16", 121.0),  # not the L40S's
        ("NVIDIA GeForce RTX 4090", "fp16", 165.2),
        ("NVIDIA GeForce RTX 3090", "fp32", 35.6),
        ("Tesla V100-SXM2-16GB", "bf16", None),  # no bf16 tensor cores: no figure
        ("Some Future GPU", "bf16", None),
    ],
)
def test_the_peak_table(name: str, dtype: str, peak: float | None) -> None:
    found = table_peak(torch.device("cuda", 0), name, dtype)
    assert found.tflops == peak
    assert ("table" in found.source) == (peak is not None)


def test_cpu_has_no_table_peak_and_the_dtype_keys() -> None:
    assert table_peak(CPU, "CPU (AVX2, 2 threads)", "fp32").tflops is None
    assert peak_dtype("fp32", tf32=True) == "tf32" and peak_dtype("fp32", tf32=False) == "fp32"
    assert peak_dtype("bf16", tf32=True) == "bf16"


def test_the_matmul_probe_measures_a_positive_rate() -> None:
    peak = measure_peak(CPU, "fp32", seconds=0.05)
    assert peak.tflops is not None and peak.tflops > 0
    assert peak.source.startswith("measured (matmul probe")


def test_a_cpu_run_has_tflops_no_mfu_and_the_monitor_cost(tiny_config) -> None:  # noqa: ANN001
    sink = ListSink()
    cfg = tiny_config("train.max_steps=8", "train.precision=fp32", "data.batch_size=32")
    result = run(cfg, sink)
    assert result.status == "completed"
    (header,) = sink.of("header")
    assert header["flops_per_sample"] == pytest.approx(27.4e6, rel=0.01)
    assert header["peak_tflops"] is None and "none known for cpu" in header["peak_source"]
    train = sink.of("train")
    assert len(train) == 4  # log_every 2
    for rec in train:
        assert rec["tflops"] is not None and rec["tflops"] > 0
        assert rec["mfu"] is None
        # FLOPs x samples / time: the same interval as samples/s
        assert rec["tflops"] == pytest.approx(
            header["flops_per_sample"] * rec["samples_per_s"] / 1e12, rel=1e-6
        )
        assert rec["host_syncs"] >= 1 and rec["monitor_s"] >= 0
        assert 0 <= rec["monitor_frac"] < 1
        assert "TFLOP/s" in format_train_line(rec) and "MFU" not in format_train_line(rec)
    # 16 steps an epoch: no evaluation in the first intervals, only the log point's sync
    assert [r["host_syncs"] for r in train[:3]] == [1, 1, 1]
    assert [r["syncs_per_step"] for r in train[:3]] == [0.5, 0.5, 0.5]


def test_a_measured_peak_gives_an_mfu(tiny_config) -> None:  # noqa: ANN001
    sink = ListSink()
    cfg = tiny_config("train.max_steps=4", "train.precision=fp32", "train.measure_peak=true")
    assert run(cfg, sink).status == "completed"
    (header,) = sink.of("header")
    assert header["peak_tflops"] > 0 and header["peak_source"].startswith("measured")
    for rec in sink.of("train"):
        assert rec["mfu"] is not None and 0 < rec["mfu"] < 1.5
        assert math.isclose(rec["mfu"], rec["tflops"] / header["peak_tflops"])
        assert "MFU" in format_train_line(rec)


@pytest.mark.slow
def test_ddp_sums_the_ranks_flop_rates(tmp_path) -> None:  # noqa: ANN001
    """Two gloo ranks: `tflops` is the job's (both ranks' samples), like samples/s; no MFU on
    a CPU; the log point's sync counted once per rank, the all-gather's in the next record."""
    import subprocess
    import sys

    from tests.cli.test_ddp import SMALL, env, records

    cmd = [sys.executable, "-m", "tuitrain", "--nproc", "2", *SMALL, "--max-steps", "4"]
    cmd += ["--precision", "fp32", "--run-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(tmp_path)
    header, train = recs[0], [r for r in recs if r["type"] == "train"]
    assert len(train) == 2
    for rec in train:
        assert rec["mfu"] is None and isinstance(rec["host_syncs"], int)
        assert rec["tflops"] == pytest.approx(
            header["flops_per_sample"] * rec["samples_per_s"] / 1e12, rel=0.02
        )
    assert train[0]["host_syncs"] == 1 and train[1]["host_syncs"] == 2  # + the all-gather


def test_the_measure_peak_flag_sets_the_config() -> None:
    from tuitrain.commands.train import build_parser, flag_overrides
    from tuitrain.core.config import load_preset

    overrides = flag_overrides(build_parser().parse_args(["--measure-peak"]))
    assert "train.measure_peak=true" in overrides
    assert load_preset("fashion-mini", overrides).train.measure_peak
    assert not load_preset(
        "fashion-mini", flag_overrides(build_parser().parse_args([]))
    ).train.measure_peak


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compile_mode", ["off", "on"])
def test_on_cuda_the_table_peak_gives_an_mfu(tiny_config, compile_mode: str) -> None:  # noqa: ANN001
    """The same count on the device (and on the plain module under compile); a GPU in the
    table gives MFU; one sync per log interval, none between (fused optimizer)."""
    sink = ListSink()
    cfg = tiny_config(
        "train.max_steps=8",
        "train.precision=bf16",
        "train.device=cuda",
        f"train.compile={compile_mode}",
        "data.batch_size=32",
    )
    assert run(cfg, sink).status == "completed"
    (header,) = sink.of("header")
    assert header["flops_per_sample"] == pytest.approx(27.4e6, rel=0.01)
    name = torch.cuda.get_device_name()
    expected = table_peak(torch.device("cuda"), name, "bf16").tflops
    assert header["peak_tflops"] == expected
    train = sink.of("train")
    for rec in train:
        assert rec["tflops"] > 0
        assert (rec["mfu"] is None) == (expected is None)
    assert train[-2]["host_syncs"] == 1 and train[-2]["syncs_per_step"] == 0.5
