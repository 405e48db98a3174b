"""Preset schema: every shipped preset loads; bad keys, types, ranges and TOML are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuitrain.core.config import (
    DEFAULT_PRESET,
    ConfigError,
    available_presets,
    config_from_dict,
    load_preset,
    parse_override,
)

REQUIRED = {"fashion-mini", "fashion-fp32", "fashion-fp16", "fashion-bf16", "resnet18-synth-bf16"}


def test_every_shipped_preset_loads() -> None:
    presets = available_presets()
    assert set(presets) >= REQUIRED
    for name in presets:
        cfg = load_preset(name)
        assert cfg.name == name
        assert cfg.preset.description, f"{name} has no description"


def test_fashion_presets_differ_only_in_precision() -> None:
    base = load_preset("fashion-fp32").to_dict()
    for mode in ("fp16", "bf16"):
        other = load_preset(f"fashion-{mode}").to_dict()
        assert other["train"].pop("precision") == mode
        other["preset"] = base["preset"]
        assert {**other, "train": {**other["train"], "precision": "fp32"}} == base
    cfg = load_preset("fashion-bf16")
    assert (cfg.data.batch_size, cfg.optim.name, cfg.optim.schedule) == (64, "adamw", "cosine")
    assert (cfg.data.hflip, cfg.data.crop_padding, cfg.train.label_smoothing) == (True, 0, 0.1)
    assert (cfg.train.epochs, cfg.model.dropout) == (10, 0.25)
    assert cfg.train.compile == "auto"  # on for CUDA only


def test_default_preset_is_offline_subset() -> None:
    assert load_preset(DEFAULT_PRESET).data.name == "fashion_mini"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"optim": {"lrr": 1e-3}}, "unknown key 'optim.lrr'; did you mean 'optim.lr'?"),
        ({"trian": {}}, "unknown key 'trian'; did you mean 'train'?"),
        ({"optim": {"lr": "fast"}}, "optim.lr must be float, not str"),
        ({"data": {"batch_size": 2.5}}, "data.batch_size must be int"),
        ({"train": {"tf32": 1}}, "train.tf32 must be bool"),
        ({"data": {"batch_size": 0}}, "data.batch_size = 0 is out of range; it must be >= 1"),
        ({"optim": {"lr": 0.0}}, "optim.lr = 0.0 is out of range; it must be > 0.0"),
        ({"train": {"epochs": 0}}, "train.epochs = 0 is out of range"),
        ({"train": {"precision": "fp8"}}, "train.precision = 'fp8' is not valid; choose one of"),
        ({"optim": 3}, "'optim' must be a table"),
        ({"optim": {"lr": float("nan")}}, "optim.lr = nan is not a finite number"),
        ({"train": {"pace_s": float("inf")}}, "train.pace_s = inf is not a finite number"),
    ],
)
def test_bad_values_name_the_key(raw: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    assert needle in str(err.value)


def test_preset_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00[train]")
    with pytest.raises(ConfigError, match="binary.toml is not UTF-8 text"):
        load_preset(str(path))


def test_malformed_toml_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[optim]\nlr = 1e-3\nname adamw\n")
    with pytest.raises(ConfigError) as err:
        load_preset(str(path))
    assert "broken.toml is not valid TOML" in str(err.value)
    assert "line 3" in str(err.value) and "column" in str(err.value)


def test_unknown_preset_lists_available() -> None:
    with pytest.raises(ConfigError) as err:
        load_preset("fashion-bf61")
    msg = str(err.value)
    assert "unknown preset 'fashion-bf61'" in msg
    assert all(name in msg for name in REQUIRED)
    assert "Did you mean 'fashion-bf16'?" in msg


def test_overrides_are_typed_and_validated() -> None:
    cfg = load_preset("fashion-mini", ["optim.lr=5e-4", "train.precision=fp16", "train.epochs=2"])
    assert (cfg.optim.lr, cfg.train.precision, cfg.train.epochs) == (5e-4, "fp16", 2)
    assert parse_override("data.data_dir=/tmp/x") == (["data", "data_dir"], "/tmp/x")
    with pytest.raises(ConfigError, match="--set: optim.lr = -1"):
        load_preset("fashion-mini", ["optim.lr=-1"])
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_preset("fashion-mini", ["optim.lr"])
    with pytest.raises(ConfigError, match="did you mean 'train.epochs'"):
        load_preset("fashion-mini", ["train.epoch=3"])


def test_user_preset_dir_and_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    folder = tmp_path / "tuitrain" / "presets"
    folder.mkdir(parents=True)
    (folder / "mine.toml").write_text('[preset]\ndescription = "my run"\n[train]\nepochs = 3\n')
    assert load_preset("mine").train.epochs == 3
    assert load_preset(str(folder / "mine.toml")).preset.description == "my run"
    with pytest.raises(ConfigError, match="does not exist"):
        load_preset(str(tmp_path / "nope.toml"))
