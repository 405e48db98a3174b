"""Train-time augmentation: crops and flips on the device batch, a function of the position."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from tuitrain.core.config import DataConfig
from tuitrain.engine.data.augment import Augment
from tuitrain.engine.data.build import build_data

CPU = torch.device("cpu")


def mini(**kw: object) -> DataConfig:
    return DataConfig(name="fashion_mini", num_workers=0, **kw)  # type: ignore[arg-type]


def collect(source: object, epoch: int, start: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in source.batches(epoch, start)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("padding", "hflip", "channels"), [(2, True, 1), (0, True, 3), (3, False, 2)]
)
def test_apply_is_a_per_sample_crop_then_flip(padding: int, hflip: bool, channels: int) -> None:
    augment = Augment(padding, hflip, seed=7, rank=0)
    x = torch.randint(0, 256, (50, channels, 28, 26), dtype=torch.uint8)
    draws = augment.draws(epoch=3, n=100, device=CPU)
    out = augment.apply(x, draws, start=40)
    padded = functional.pad(x, (padding,) * 4)
    expected = []
    for i in range(50):
        j = 40 + i
        dy, dx = int(draws.dy[j]), int(draws.dx[j])
        crop = padded[i, :, dy : dy + 28, dx : dx + 26]
        expected.append(crop.flip(-1) if draws.flip[j] else crop)
    assert out.dtype == torch.uint8 and torch.equal(out, torch.stack(expected))
    # the draws cover the whole range and nothing outside it
    assert set(draws.dx.tolist()) == set(range(2 * padding + 1))
    flipped = draws.flip.float().mean().item()
    assert (0.3 < flipped < 0.7) if hflip else flipped == 0.0


def test_draws_are_a_function_of_seed_epoch_and_rank() -> None:
    def flips(seed: int, epoch: int, rank: int) -> torch.Tensor:
        return Augment(2, True, seed, rank).draws(epoch, 500, CPU).flip

    assert torch.equal(flips(1, 2, 0), flips(1, 2, 0))
    assert not torch.equal(flips(1, 2, 0), flips(1, 3, 0))
    assert not torch.equal(flips(1, 2, 0), flips(2, 2, 0))
    assert not torch.equal(flips(1, 2, 0), flips(1, 2, 1))


@pytest.mark.parametrize("loader", ["device", "dataloader"])
def test_a_resumed_epoch_sees_the_same_augmented_batches(loader: str) -> None:
    cfg = mini(train_samples=600, batch_size=64, loader=loader, crop_padding=2, hflip=True)
    train = build_data(cfg, CPU, seed=1).train
    whole = collect(train, 5)
    tail = collect(train, 5, start=4)
    assert len(tail) == len(whole) - 4
    for (xa, ya), (xb, yb) in zip(whole[4:], tail, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_both_loaders_augment_alike_and_differ_from_plain_batches() -> None:
    kw = {"train_samples": 512, "batch_size": 128, "crop_padding": 2, "hflip": True}
    device = collect(build_data(mini(loader="device", **kw), CPU, seed=3).train, 0)
    loader = collect(build_data(mini(loader="dataloader", **kw), CPU, seed=3).train, 0)
    plain = collect(build_data(mini(train_samples=512, batch_size=128), CPU, seed=3).train, 0)
    for (xd, yd), (xl, yl), (xp, yp) in zip(device, loader, plain, strict=True):
        assert torch.equal(xd, xl) and torch.equal(yd, yl) and torch.equal(yd, yp)
        changed = (xd != xp).flatten(1).any(1).float().mean().item()
        assert changed > 0.8  # 1 in 50 draws is (no shift, no flip)
    # another epoch, other crops
    assert not torch.equal(
        device[0][0], collect(build_data(mini(**kw), CPU, seed=3).train, 1)[0][0]
    )


def test_augmentation_leaves_the_global_rng_and_val_alone() -> None:
    bundle = build_data(mini(train_samples=256, batch_size=64, crop_padding=2, hflip=True), CPU, 0)
    plain = build_data(mini(train_samples=256, batch_size=64), CPU, seed=0)
    before = torch.get_rng_state()
    collect(bundle.train, 0)
    assert torch.equal(before, torch.get_rng_state())
    for (xa, ya), (xb, yb) in zip(collect(bundle.val, 0), collect(plain.val, 0), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert "train aug: random crop ±2 px + h-flip" in bundle.description
    assert "aug" not in plain.description


def test_augmenting_a_data_set_of_vectors_is_refused_before_training() -> None:
    from tuitrain.core.errors import UserError

    cfg = DataConfig(
        name="tests.cli.datasets_for_tests:flat_vectors",
        crop_padding=2,
        num_workers=0,
        batch_size=16,
    )
    with pytest.raises(UserError, match=r"need images \(C×H×W items\).*\(784,\); set both off"):
        build_data(cfg, CPU, seed=0)
    plain = DataConfig(
        name="tests.cli.datasets_for_tests:flat_vectors", num_workers=0, batch_size=16
    )
    assert "aug" not in build_data(plain, CPU, seed=0).description
