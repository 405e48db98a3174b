"""Every bad input exits 2 with one sentence: user factories, datasets and settings that are
wrong fail as a UserError naming the thing and the fix, never as "looks like a bug"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tuitrain.core.config import Config, DataConfig, load_preset
from tuitrain.core.errors import UserError
from tuitrain.engine import setup as setup_mod
from tuitrain.engine.data import loader as loader_mod
from tuitrain.engine.data.build import build_data
from tuitrain.engine.data.idx import FILE_NAMES, write_idx
from tuitrain.engine.runner import RunResult, describe_failure, run
from tuitrain.engine.setup import DistInfo, build_parts
from tuitrain.metrics.sinks import NullSink

CPU = torch.device("cpu")
BAD = "tests.engine.bad_factories"
SMALL = ["data.train_samples=512", "data.val_samples=256", "train.max_steps=2"]


def config(*overrides: str) -> Config:
    return load_preset("fashion-mini", [*SMALL, *overrides])


def refused(*overrides: str) -> RunResult:
    """Run in-process; the run must fail as a user error: exit 2, one line, no traceback."""
    result = run(config(*overrides), NullSink())
    assert result.status == "failed", result
    assert (result.exit_code, result.is_bug, result.traceback) == (2, False, ""), result.reason
    assert isinstance(result.error, UserError)
    assert "\n" not in result.reason
    return result


def user_data(name: str, *overrides: str) -> list[str]:
    return [f'data.name="{BAD}:{name}"', "data.batch_size=16", "data.num_workers=0", *overrides]


# --------------------------------------------------------------------------- A6: grad_accum


def test_grad_accum_above_the_batches_of_an_epoch() -> None:
    # 512 samples in batches of 256: 2 batches per epoch, and a step would need 3
    result = refused("optim.grad_accum=3")
    assert result.reason == (
        "optim.grad_accum = 3 needs 3 batches per epoch, but the train split gives 2 on this"
        " rank (data.batch_size = 256): lower optim.grad_accum or data.batch_size, or train"
        " on more samples."
    )
    assert run(config("optim.grad_accum=2"), NullSink()).status == "completed"


# --------------------------------------------------------------------------- A5b: host memory


def test_host_allocation_failure_while_building_is_out_of_memory_not_a_bug() -> None:
    result = run(config(f'model.name="{BAD}:huge_model"'), NullSink())
    assert (result.status, result.exit_code, result.is_bug) == ("failed", 1, False)
    assert result.reason.startswith("out of host memory while building the data and the model (")
    assert "GiB at once)" in result.reason and "\n" not in result.reason


def test_host_allocation_failure_at_a_step_is_out_of_memory_not_a_bug() -> None:
    result = run(config(f'model.name="{BAD}:host_oom_in_training"'), NullSink())
    assert (result.status, result.exit_code, result.is_bug) == ("failed", 1, False)
    assert result.reason == "out of host memory at step 1 (batch 256) (32768.0 GiB at once)"


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory:"
            " you tried to allocate 17179869184 bytes."
        ),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate"
            " memory: you tried to allocate 17179869184 bytes. Error code 12 (Cannot allocate"
            " memory)"
        ),
    ],
)
def test_both_cpu_allocator_messages_are_out_of_memory(error: RuntimeError) -> None:
    message, hint, is_bug = describe_failure(error, None)
    assert message == "out of host memory while building the data and the model (16.0 GiB at once)"
    assert not is_bug and "data.image_size" in hint
    assert describe_failure(RuntimeError("some other failure"), None)[2]  # still a bug


# --------------------------------------------------------------------------- B: model factories


@pytest.mark.parametrize("factory", ["no_parameters", "all_frozen"])
def test_model_without_trainable_parameters(factory: str) -> None:
    result = refused(f'model.name="{BAD}:{factory}"')
    assert result.reason == (
        f"model.name = '{BAD}:{factory}' has no parameter to train (none, or all with"
        " requires_grad=False); give the model at least one trainable parameter."
    )


def test_model_factory_with_other_arguments() -> None:
    # Linear takes no num_classes keyword: it is called bare, and says what it misses
    result = refused('model.name="torch.nn:Linear"')
    assert result.reason.startswith(
        "model.name = 'torch.nn:Linear': torch.nn:Linear() raised TypeError: "
    )
    assert result.reason.endswith(
        "(it is called with the keyword num_classes when it takes it, else with nothing)."
    )


def test_model_factory_that_raises() -> None:
    result = refused(f'model.name="{BAD}:raises_value_error"')
    assert result.reason == (
        f"model.name = '{BAD}:raises_value_error': {BAD}:raises_value_error(num_classes=10)"
        " raised ValueError: no such size; fix the factory (it is called with the keyword"
        " num_classes when it takes it, else with nothing)."
    )


@pytest.mark.parametrize("spec", [".x:y", "..:x", ".:f"])
def test_relative_module_name(spec: str) -> None:
    result = refused(f'model.name="{spec}"')
    assert result.reason == (
        f"model.name = '{spec}' names a relative module; write the full name,"
        " 'package.module:function'."
    )


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("def make(:\n", "SyntaxError: "),
        ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
        ("import os\nos.environ['NOT_SET_ANYWHERE_XYZ']\n", "KeyError: 'NOT_SET_ANYWHERE_XYZ'"),
    ],
)
def test_module_that_fails_to_import(
    source: str, error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"broken_{abs(hash(source))}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for key in ("model.name", "data.name"):
        result = refused(f'{key}="{module}:make"')
        assert result.reason.startswith(f"{key} = '{module}:make': importing {module} raised ")
        assert error in result.reason and result.reason.endswith("; fix the module.")


def test_model_that_does_not_take_the_data() -> None:
    result = refused(f'model.name="{BAD}:wrong_input"')
    assert result.reason == (
        f"model.name = '{BAD}:wrong_input' fails on an input of the data's shape (1, 1, 28, 28)"
        " (RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x784 and 5x10)); make"
        " the model fit the data or the data the model."
    )


def test_model_with_the_wrong_number_of_logits() -> None:
    result = refused(f'model.name="{BAD}:wrong_classes"')
    assert result.reason == (
        f"model.name = '{BAD}:wrong_classes' returns logits of shape (1, 11) for an input of"
        " shape (1, 1, 28, 28); it must return float logits of shape (1, 10), one per class"
        " (data.num_classes = 10)."
    )
    tuple_result = refused(f'model.name="{BAD}:returns_tuple"')
    assert tuple_result.reason == (
        f"model.name = '{BAD}:returns_tuple' returns a tuple for an input of shape"
        " (1, 1, 28, 28); it must return a Tensor of logits of shape (1, 10)."
    )


def test_resnet18_passes_the_dry_forward_on_small_images() -> None:
    # a registered model that adapts to the data: 8x8 images go through (adaptive pooling)
    parts = build_parts(
        load_preset(
            "fashion-mini",
            ["model.name=resnet18", "data.name=synthetic", "data.image_size=8", "data.channels=1"],
        ),
        DistInfo(),
    )
    assert parts.model.training


def test_dry_forward_leaves_train_mode_and_the_rng_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = config(f'model.name="{BAD}:noisy"', "model.dropout=0.5")
    parts = build_parts(cfg, DistInfo())
    assert parts.model.training
    after = torch.get_rng_state()
    monkeypatch.setattr(setup_mod, "dry_forward", lambda *args: None)
    build_parts(cfg, DistInfo())
    assert torch.equal(torch.get_rng_state(), after)  # as if there were no dry forward


# --------------------------------------------------------------------------- C: datasets


@pytest.mark.parametrize(
    ("factory", "val_shape"),
    [("val_smaller_images", "(1, 14, 14)"), ("val_three_channels", "(3, 28, 28)")],
)
def test_user_splits_with_different_input_shapes(factory: str, val_shape: str) -> None:
    result = refused(*user_data(factory))
    assert result.reason == (
        f"the inputs of {BAD}:{factory} have shape (1, 28, 28) in the 'train' split but"
        f" {val_shape} in the 'val' split; both splits must give inputs of one shape."
    )


def test_idx_splits_with_different_image_sizes(tmp_path: Path) -> None:
    for split, size in (("train", 14), ("val", 28)):
        image_stem, label_stem = FILE_NAMES[split]
        write_idx(tmp_path / image_stem, torch.zeros(20, size, size, dtype=torch.uint8))
        write_idx(tmp_path / label_stem, (torch.arange(20) % 10).to(torch.uint8))
    with pytest.raises(UserError) as info:
        build_data(DataConfig(data_dir=str(tmp_path), batch_size=4), CPU, seed=0)
    assert str(info.value) == (
        f"the images of Fashion-MNIST from {tmp_path} are 14x14 in the 'train' split but 28x28"
        " in the 'val' split; both splits must have images of one size."
    )


def all_batches(name: str, num_workers: int = 0) -> None:
    cfg = DataConfig(name=f"{BAD}:{name}", batch_size=16, num_workers=num_workers)
    bundle = build_data(cfg, CPU, seed=0)
    for source in (bundle.train, bundle.val):
        for _ in source.batches(0):
            pass


def test_ragged_items() -> None:
    with pytest.raises(UserError) as info:
        all_batches("ragged")
    assert str(info.value).startswith(
        f"loading a batch of the 'train' split of {BAD}:ragged failed (RuntimeError: stack"
        " expects each tensor to be equal size"
    )
    assert str(info.value).endswith(
        "; fix the dataset: every item an (x, y) pair, x a Tensor of one shape, y an integer class."
    )


def test_string_labels_refused_at_build() -> None:
    result = refused(*user_data("string_labels"))
    assert result.reason == (
        f"y in item 0 of the 'train' split of {BAD}:string_labels is a str ('cat'); labels"
        " must be integer class indices (an int or a one-element integer Tensor)."
    )


def test_a_string_label_further_in() -> None:
    with pytest.raises(UserError, match=rf"^loading a batch of the 'train' split of {BAD}"):
        all_batches("string_label_later")


def test_getitem_raising_in_the_first_item() -> None:
    result = refused(*user_data("key_error_first"))
    assert result.reason == (
        f"item 0 of the 'train' split of {BAD}:key_error_first raised KeyError: 'image_0'; fix"
        " the dataset's __getitem__."
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitem_raising_later(num_workers: int) -> None:
    # with workers the error comes back from another process; the message is still its own
    with pytest.raises(UserError) as info:
        all_batches("key_error_later", num_workers)
    assert str(info.value).startswith(
        f"loading a batch of the 'train' split of {BAD}:key_error_later failed (KeyError:"
        " 'image_9'); "
    )


def test_getitem_raising_later_ends_the_run_as_a_user_error() -> None:
    result = refused(*user_data("key_error_later"))
    assert "(KeyError: 'image_9')" in result.reason


def test_negative_length() -> None:
    result = refused(*user_data("negative_length"))
    assert result.reason == (
        f"len() of the dataset {BAD}:negative_length(split='train') failed (ValueError:"
        " __len__() should return >= 0); its __len__ must return the number of items."
    )


def test_a_good_user_dataset_still_trains() -> None:
    result = run(config(*user_data("good")), NullSink())
    assert result.status == "completed", result.reason


@pytest.mark.parametrize(
    ("label", "ok"),
    [
        (3, True),
        (np.int64(3), True),
        (torch.tensor(3), True),
        (torch.tensor([3], dtype=torch.uint8), True),
        (np.array(3), True),
        (True, False),
        (3.0, False),
        ("3", False),
        (None, False),
        (torch.tensor(3.0), False),
        (torch.tensor([1, 2]), False),
        (np.array(["cat"]), False),
        (np.array([object()]), False),
    ],
)
def test_what_counts_as_a_label(label: object, ok: bool) -> None:
    assert loader_mod._is_class_index(label) is ok
