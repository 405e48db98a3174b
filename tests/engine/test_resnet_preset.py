"""The ResNet-18 GPU preset: its CIFAR-stem model, and the warning it starts with on a CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tuitrain.core.config import load_preset
from tuitrain.core.errors import UserError
from tuitrain.engine.models.build import build_model
from tuitrain.engine.runner import run
from tuitrain.metrics.sinks import NullSink


class Capture(NullSink):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(record)


def test_cifar_stem_keeps_the_resolution_of_small_images() -> None:
    torch.manual_seed(0)
    model = build_model("resnet18_cifar", 10, 0.0, (1, 28, 28))
    assert isinstance(model.maxpool, nn.Identity)
    conv1 = model.conv1
    assert (conv1.in_channels, conv1.kernel_size, conv1.stride) == (1, (3, 3), (1, 1))
    seen: dict[str, torch.Size] = {}

    def keep_shape(_module: nn.Module, _inputs: object, out: torch.Tensor) -> None:
        seen["layer1"] = out.shape

    model.layer1.register_forward_hook(keep_shape)
    out = model(torch.randn(2, 1, 28, 28))
    assert out.shape == (2, 10)
    assert seen["layer1"][-2:] == (28, 28)  # the ImageNet stem would give 7x7 here
    assert sum(p.numel() for p in model.parameters()) == 11_172_810
    # zero-init residual: every block's last BN starts at 0, so each block is the identity
    assert all(not block.bn2.weight.detach().any() for block in model.layer1)


def test_cifar_stem_refuses_images_too_small() -> None:
    with pytest.raises(UserError, match="at least 8x8 pixels, the data gives"):
        build_model("resnet18_cifar", 10, 0.0, (1, 4, 4))


def test_the_gpu_preset_is_marked_and_differs_from_the_cnn_ones() -> None:
    cfg = load_preset("fashion-resnet18-bf16")
    assert cfg.preset.gpu and cfg.preset.description.startswith("GPU preset")
    assert (cfg.model.name, cfg.train.precision, cfg.data.name) == (
        "resnet18_cifar",
        "bf16",
        "fashion_mnist",
    )
    assert not any(load_preset(p).preset.gpu for p in ("fashion-fp32", "fashion-bf16"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for a run off the GPU")
def test_a_gpu_preset_on_the_cpu_starts_with_a_warning_and_runs() -> None:
    cfg = load_preset(
        "fashion-resnet18-bf16",
        [
            "data.name=synthetic", "data.channels=1", "data.image_size=16",
            "data.train_samples=8", "data.val_samples=8", "data.batch_size=4",
            "train.max_steps=1", "train.precision=fp32", "train.log_every=1",
        ],
    )  # fmt: skip
    sink = Capture()
    result = run(cfg, sink)
    assert result.status == "completed"  # a warning, not a refusal
    (warning,) = [r for r in sink.records if r["type"] == "event" and r.get("kind") == "device"]
    assert warning["level"] == "warning"
    assert "preset fashion-resnet18-bf16 is meant for a GPU" in warning["message"]
    (header,) = [r for r in sink.records if r["type"] == "header"]
    tflop = header["flops_per_sample"] * 8 / 1e12  # 8 images an epoch
    assert f"({tflop:.3g} TFLOP an epoch) and runs on the CPU here" in warning["message"]
    assert warning["hint"] == "run it on a CUDA GPU, or pick fashion-fp32 on this machine"


def test_a_cpu_preset_on_the_cpu_has_no_such_warning(tiny_config) -> None:
    sink = Capture()
    run(tiny_config("train.max_steps=1", "train.device=cpu", "train.precision=fp32"), sink)
    assert not [r for r in sink.records if r.get("kind") == "device"]
