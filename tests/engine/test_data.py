"""Tests of the data layer: the IDX reader, the lookup order, both batch paths, DDP shards,
user dataset factories and the shipped mini subset."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from tuitrain.core.config import DataConfig
from tuitrain.core.errors import UserError
from tuitrain.engine.data import idx as idx_mod
from tuitrain.engine.data import sources as data_mod
from tuitrain.engine.data.build import build_data
from tuitrain.engine.data.fashion import FASHION_MEAN, FASHION_STD, MINI_DIR
from tuitrain.engine.data.idx import (
    FILE_NAMES,
    locate_fashion_mnist,
    read_idx,
    read_split,
    write_idx,
)

CPU = torch.device("cpu")
FULL_DIR = Path("/usr/share/datasets/fashion-mnist")
# the factories below are referenced through this module's own import name, which works
# however pytest imports it (rootdir-relative "test_data" or "tests.engine.test_data")
HERE = __name__


# --------------------------------------------------------------------------- fixtures, helpers


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No network, no real user cache, no inherited TUITRAIN_DATA in any test."""
    monkeypatch.setenv("TUITRAIN_NO_DOWNLOAD", "1")
    monkeypatch.delenv("TUITRAIN_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def fake_set(folder: Path, n_train: int = 40, n_val: int = 20, gz: bool = True) -> Path:
    """Write a tiny IDX set: image i is filled with i % 256, label i % 10."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("val", n_val)):
        image_stem, label_stem = FILE_NAMES[split]
        ramp = torch.arange(n, dtype=torch.int64) % 256
        images = ramp.to(torch.uint8)[:, None, None].expand(n, 8, 8).contiguous()
        suffix = ".gz" if gz else ""
        write_idx(folder / f"{image_stem}{suffix}", images)
        write_idx(folder / f"{label_stem}{suffix}", (torch.arange(n) % 10).to(torch.uint8))
    return folder


def mini(**kw: object) -> DataConfig:
    return DataConfig(name="fashion_mini", **kw)  # type: ignore[arg-type]


def collect(source: data_mod.BatchSource, epoch: int, start: int = 0) -> list[tuple]:
    return [(x.clone(), y.clone()) for x, y in source.batches(epoch, start)]


def assert_same_batches(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert torch.equal(ya, yb)
        torch.testing.assert_close(xa, xb)


# --------------------------------------------------------------------------- IDX reader


@pytest.mark.parametrize("gz", [True, False])
def test_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    images = torch.randint(0, 256, (7, 28, 28), dtype=torch.uint8)
    path = tmp_path / ("x-idx3-ubyte.gz" if gz else "x-idx3-ubyte")
    write_idx(path, images)
    assert path.read_bytes().startswith(b"\x1f\x8b") == gz
    back = read_idx(path, ndim=3)
    assert back.dtype == torch.uint8 and back.shape == (7, 28, 28)
    assert torch.equal(back, images)
    with pytest.raises(UserError, match="dimensions"):
        read_idx(path, ndim=1)


def test_read_split_gives_int64_labels(tmp_path: Path) -> None:
    images, labels = read_split(fake_set(tmp_path / "d", gz=False), "train")
    assert images.dtype == torch.uint8 and images.shape == (40, 8, 8)
    assert labels.dtype == torch.int64 and labels.tolist() == [i % 10 for i in range(40)]


@pytest.mark.parametrize(
    "payload",
    [
        b"\x12\x34\x08\x01\x00\x00\x00\x02ab",  # bad magic
        b"\x00\x00\x08\x01\x00\x00\x00\x05ab",  # header says 5 items, 2 present
        b"\x00\x00\x0d\x01\x00\x00\x00\x01abcd",  # float elements
        gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x02ab", mtime=0)[:-6],  # truncated gzip
    ],
)
def test_corrupt_file_is_a_user_error_naming_it(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(payload)
    with pytest.raises(UserError, match="train-labels-idx1-ubyte"):
        read_idx(path)


def test_mismatched_counts(tmp_path: Path) -> None:
    folder = fake_set(tmp_path / "d")
    write_idx(folder / "train-labels-idx1-ubyte.gz", torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(UserError, match="40 images but"):
        read_split(folder, "train")


# --------------------------------------------------------------------------- lookup


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = fake_set(tmp_path / "flag")
    env = fake_set(tmp_path / "env" / "FashionMNIST" / "raw", gz=False)  # torchvision layout
    cache = fake_set(tmp_path / "xdg-cache" / "tuitrain" / "fashion-mnist")
    system = fake_set(tmp_path / "system")
    monkeypatch.setattr(idx_mod, "SYSTEM_DIR", system)
    monkeypatch.setenv("TUITRAIN_DATA", str(tmp_path / "env"))
    assert locate_fashion_mnist(str(flag)) == flag
    assert locate_fashion_mnist("") == env
    monkeypatch.delenv("TUITRAIN_DATA")
    assert locate_fashion_mnist("") == cache
    for f in cache.iterdir():
        f.unlink()
    assert locate_fashion_mnist("") == system
    bundle = build_data(DataConfig(batch_size=8), CPU, seed=0)
    assert bundle.description == f"Fashion-MNIST from {system} (40 train / 20 val)"
    assert bundle.input_shape == (1, 8, 8)


def test_wrong_data_dir_does_not_fall_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idx_mod, "SYSTEM_DIR", fake_set(tmp_path / "system"))
    with pytest.raises(UserError, match="--data-dir .*empty") as info:
        locate_fashion_mnist(str(tmp_path / "empty"))
    message = str(info.value)  # the fix too: where else it looks
    assert "leave it out" in message and "TUITRAIN_DATA" in message
    assert str(tmp_path / "system") in message and "dataset-fashion-mnist" in message


def test_missing_everywhere_lists_every_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idx_mod, "SYSTEM_DIR", tmp_path / "no-system")
    with pytest.raises(UserError) as info:
        build_data(DataConfig(), CPU, seed=0)
    message = str(info.value)
    for needle in (
        "--data-dir",
        "TUITRAIN_DATA",
        str(tmp_path / "xdg-cache" / "tuitrain" / "fashion-mnist"),
        "apt-get install dataset-fashion-mnist",
        "download",
        "TUITRAIN_NO_DOWNLOAD",
        "--preset fashion-mini",
    ):
        assert needle in message
    assert message.count(". ") == 0  # one sentence


def test_unreachable_download_host_fails_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUITRAIN_NO_DOWNLOAD")
    monkeypatch.setattr(idx_mod, "_host_resolves", lambda host, timeout_s: False)
    assert "unreachable" in idx_mod._download(tmp_path / "cache", None)


# --------------------------------------------------------------------------- mini subset, order


def test_mini_subset_is_real_and_balanced() -> None:
    bundle = build_data(mini(), CPU, seed=0)
    assert (bundle.train.dataset_size, bundle.val.dataset_size) == (6000, 1000)
    assert bundle.input_shape == (1, 28, 28) and bundle.num_classes == 10
    assert "6,000 train / 1,000 val" in bundle.description
    for split, per_class in (("train", 600), ("val", 100)):
        images, labels = read_split(MINI_DIR, split)
        assert images.shape[1:] == (28, 28)
        assert torch.bincount(labels, minlength=10).tolist() == [per_class] * 10
    assert "MIT" in (MINI_DIR / "LICENSE").read_text() and (MINI_DIR / "README.md").is_file()


def test_normalised_mean_zero_std_one() -> None:
    bundle = build_data(mini(batch_size=500), CPU, seed=0)
    x = torch.cat([x for x, _ in bundle.train.batches(0)])
    assert x.dtype == torch.float32 and x.shape == (6000, 1, 28, 28)
    assert abs(x.mean().item()) < 0.03 and abs(x.std().item() - 1) < 0.03


def test_order_depends_only_on_seed_and_epoch() -> None:
    a = build_data(mini(train_samples=1000, batch_size=100), CPU, seed=3).train
    b = build_data(mini(train_samples=1000, batch_size=100), CPU, seed=3).train
    c = build_data(mini(train_samples=1000, batch_size=100), CPU, seed=4).train
    assert torch.equal(a.indices(0), b.indices(0))
    assert not torch.equal(a.indices(0), a.indices(1))
    assert not torch.equal(a.indices(0), c.indices(0))
    assert_same_batches(collect(a, 2), collect(b, 2))
    assert sorted(a.indices(0).tolist()) == list(range(1000))


@pytest.mark.parametrize("loader", ["device", "dataloader"])
def test_start_skips_exactly(loader: str) -> None:
    cfg = mini(train_samples=600, batch_size=64, loader=loader, num_workers=0)
    train = build_data(cfg, CPU, seed=1).train
    assert len(train) == 9 and train.num_samples == 576  # last partial batch dropped
    assert_same_batches(collect(train, 5, start=4), collect(train, 5)[4:])
    assert collect(train, 5, start=9) == []


def test_val_keeps_last_batch_in_file_order() -> None:
    val = build_data(mini(eval_batch_size=300), CPU, seed=0).val
    batches = collect(val, 7)
    assert [len(y) for _, y in batches] == [300, 300, 300, 100]
    assert torch.equal(torch.cat([y for _, y in batches]), read_split(MINI_DIR, "val")[1])


@pytest.mark.parametrize("loader", ["device", "dataloader"])
def test_ddp_shards_are_disjoint_and_equal(loader: str) -> None:
    cfg = mini(train_samples=1001, batch_size=50, loader=loader, num_workers=0)
    ranks = [build_data(cfg, CPU, seed=5, rank=r, world_size=2).train for r in (0, 1)]
    shards = [set(r.indices(3).tolist()) for r in ranks]
    assert len(ranks[0]) == len(ranks[1]) == 10
    assert len(shards[0]) == len(shards[1]) == 500
    assert not shards[0] & shards[1]
    assert shards[0] | shards[1] <= set(range(1001))
    assert sum(len(y) for _, y in ranks[1].batches(3)) == ranks[1].num_samples == 500


@pytest.mark.parametrize("channels_last", [True, False])
def test_channels_last(channels_last: bool) -> None:
    cfg = DataConfig(name="synthetic", image_size=8, train_samples=64, batch_size=32)
    bundle = build_data(cfg, CPU, seed=0, channels_last=channels_last)
    x, _ = next(iter(bundle.train.batches(0)))
    assert x.shape == (32, 3, 8, 8)
    assert x.is_contiguous(memory_format=torch.channels_last) == channels_last


def test_batch_larger_than_the_set_is_a_user_error() -> None:
    with pytest.raises(UserError, match="data.batch_size"):
        build_data(mini(train_samples=10, batch_size=64), CPU, seed=0)


# --------------------------------------------------------------------------- DataLoader path


def test_dataloader_path_matches_device_path() -> None:
    cfg = mini(train_samples=1000, batch_size=100, num_workers=0)
    fast = build_data(cfg, CPU, seed=2)
    cfg.loader = "dataloader"
    slow = build_data(cfg, CPU, seed=2)
    assert len(slow.train) == len(fast.train) == 10
    batches = collect(slow.train, 1)
    x, y = batches[0]
    assert x.dtype == torch.float32 and x.shape == (100, 1, 28, 28) and y.dtype == torch.int64
    assert_same_batches(batches, collect(fast.train, 1))  # same permutation, same batches
    assert sorted(slow.train.indices(1).tolist()) == list(range(1000))
    assert_same_batches(collect(slow.val, 0), collect(fast.val, 0))


def test_dataloader_workers_persist_across_epochs() -> None:
    cfg = mini(train_samples=512, batch_size=64, loader="dataloader", num_workers=2)
    train = build_data(cfg, CPU, seed=0).train
    labels = read_split(MINI_DIR, "train")[1][:512]
    for epoch in (0, 1):
        ys = torch.cat([y for _, y in train.batches(epoch)])
        assert torch.equal(ys, labels[train.indices(epoch)])
    assert train._loader._iterator is not None  # the worker pool is kept, not rebuilt
    assert_same_batches(collect(train, 1, start=6), collect(train, 1)[6:])


# --------------------------------------------------------------------------- user datasets


class _Pairs(Dataset):
    def __init__(self, n: int, label_offset: int = 0, dtype: torch.dtype = torch.float32) -> None:
        self.n, self.offset, self.dtype = n, label_offset, dtype

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 4, 4), i % 200, dtype=self.dtype), (i % 10) + self.offset


def make_dataset(split: str) -> Dataset:
    return _Pairs(96 if split == "train" else 30)


def make_uint8_dataset(split: str) -> Dataset:
    return _Pairs(32, dtype=torch.uint8)


def make_bad_labels(split: str) -> Dataset:
    return _Pairs(40, label_offset=3)  # labels 3..12 with num_classes 10


NOT_CALLABLE = 42


def test_user_factory() -> None:
    name = f"{HERE}:make_dataset"
    bundle = build_data(DataConfig(name=name, batch_size=32, num_workers=0), CPU, seed=0)
    assert bundle.input_shape == (3, 4, 4)
    assert bundle.description == f"{name} (96 train / 30 val)"
    batches = collect(bundle.train, 0)
    assert len(batches) == 3
    x, y = batches[0]
    assert x.dtype == torch.float32 and x.shape == (32, 3, 4, 4) and y.dtype == torch.int64
    seen = torch.cat([x[:, 0, 0, 0] for x, _ in batches]).long()
    assert sorted(seen.tolist()) == list(range(96))
    assert sum(len(y) for _, y in bundle.val.batches(0)) == 30


def test_user_uint8_inputs_are_only_scaled() -> None:
    cfg = DataConfig(name=f"{HERE}:make_uint8_dataset", batch_size=32, num_workers=0)
    x, _ = next(iter(build_data(cfg, CPU, seed=0).train.batches(0)))
    assert x.min().item() >= 0 and x.max().item() == pytest.approx(31 / 255)


def test_user_labels_out_of_range_caught_on_the_cpu() -> None:
    # on the meta device a check done after the copy could not read the labels at all
    cfg = DataConfig(name=f"{HERE}:make_bad_labels", batch_size=40, num_workers=0)
    bundle = build_data(cfg, torch.device("meta"), seed=0)
    with pytest.raises(UserError) as info:
        next(iter(bundle.train.batches(0)))
    assert str(info.value) == (
        f"label 10 in the 'train' split of {HERE}:make_bad_labels is outside [0, 10);"
        " set data.num_classes or fix the dataset."
    )


def test_fashion_labels_out_of_range_caught_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = fake_set(tmp_path / "d")
    with pytest.raises(UserError, match=r"label 5 in the 'train' split .* outside \[0, 5\)"):
        build_data(DataConfig(data_dir=str(folder), num_classes=5), torch.device("meta"), 0)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("mnist_please", "unknown"),
        ("no_such_module_xyz:make", "cannot import no_such_module_xyz"),
        (":make", "must look like"),
        (f"{HERE}:no_such_function", "has no attribute"),
        (f"{HERE}:NOT_CALLABLE", "not callable"),
    ],
)
def test_bad_factory_is_a_user_error(name: str, match: str) -> None:
    with pytest.raises(UserError, match=match):
        build_data(DataConfig(name=name), CPU, seed=0)


# --------------------------------------------------------------------------- synthetic


def test_synthetic_is_seeded_and_cheap() -> None:
    cfg = DataConfig(name="synthetic", image_size=16, channels=3, batch_size=256)
    a, b = build_data(cfg, CPU, seed=9), build_data(cfg, CPU, seed=9)
    assert (a.train.dataset_size, a.val.dataset_size) == (2560, 512)
    assert a.input_shape == (3, 16, 16) and len(a.train) == 10
    assert a.train._images.shape[0] == 256  # a pool, indexed modulo
    assert_same_batches(collect(a.train, 0)[:2], collect(b.train, 0)[:2])
    x, y = next(iter(a.train.batches(0)))
    assert x.shape == (256, 3, 16, 16) and int(y.min()) >= 0 and int(y.max()) < 10
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05


# --------------------------------------------------------------------------- the real full set


@pytest.mark.skipif(not FULL_DIR.exists(), reason="needs apt package dataset-fashion-mnist")
def test_full_fashion_mnist_from_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idx_mod, "SYSTEM_DIR", FULL_DIR)
    bundle = build_data(DataConfig(batch_size=1000), CPU, seed=0)
    assert bundle.description == f"Fashion-MNIST from {FULL_DIR} (60,000 train / 10,000 val)"
    assert (bundle.train.num_samples, bundle.val.num_samples) == (60000, 10000)
    x = torch.cat([x for x, _ in bundle.val.batches(0)])
    # the published statistics are the training set's; the test set is close to them
    assert abs(x.mean().item()) < 0.02 and abs(x.std().item() - 1) < 0.02
    assert FASHION_MEAN == 0.2860 and FASHION_STD == 0.3530
