"""Ranges and limits a user could mean: every numeric key is checked at config time against
what its consumer accepts (one process and DDP alike), every text key is bounded so the
header of any run tuitrain writes is one `watch` reads, user presets that are not tables or
not files are listed as unreadable, and the sentences name the real cause and source."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import typing
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuitrain.cli import main
from tuitrain.core.config import (
    INT_MAX,
    SECTIONS,
    TEXT_MAX,
    Config,
    ConfigError,
    config_from_dict,
    load_preset,
)
from tuitrain.rundir.read import PROBE_BYTES

pytestmark = pytest.mark.timeout(60)

NUMERIC = [
    (section, f.name, typing.get_type_hints(cls)[f.name], f.metadata)
    for section, cls in SECTIONS.items()
    for f in dataclasses.fields(cls)
    if typing.get_type_hints(cls)[f.name] in (int, float)
]
TEXT = [
    (section, f.name, f.metadata)
    for section, cls in SECTIONS.items()
    for f in dataclasses.fields(cls)
    if typing.get_type_hints(cls)[f.name] is str
]


def consumer_takes(section: str, key: str, value: float) -> None:
    """What the code that reads the key does with it, at the accepted value."""
    if key.endswith("_s"):  # waits: threading timers and subprocess timeouts
        assert value <= threading.TIMEOUT_MAX, f"{section}.{key}={value} overflows a wait"
        threading.Event().wait(min(value, 0.0))  # the type is one a wait takes
    if (section, key) == ("distributed", "timeout_s"):
        assert timedelta(seconds=value) >= timedelta(seconds=1)  # init_process_group's
    if (section, key) == ("train", "seed"):
        import numpy as np

        np.random.RandomState(value)  # numpy's legacy seeding takes 0..2**32-1 only
    elif isinstance(value, int):
        assert value <= INT_MAX  # torch and numpy index sizes
    else:
        assert abs(value) < 1e300


huge = st.one_of(
    st.sampled_from([1e300, -1e300, 1e-300, 2**63, 2**31, -(2**63), 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
)


@pytest.mark.parametrize(("section", "key", "tp", "meta"), NUMERIC, ids=lambda v: str(v)[:20])
@given(value=huge)
@settings(max_examples=25, deadline=None)
def test_every_numeric_key_is_refused_or_fits_its_consumer(
    section: str, key: str, tp: type, meta: dict, value: float
) -> None:
    if tp is int and isinstance(value, float):
        value = int(value) if abs(value) < 1e30 else value
    try:
        cfg = config_from_dict({section: {key: value}})
    except ConfigError as exc:
        assert f"{section}.{key}" in str(exc)
        return
    consumer_takes(section, key, getattr(getattr(cfg, section), key))


def test_the_ddp_path_refuses_the_same_values_before_any_rank_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--nproc", "2", "--no-ui", "--set", "distributed.timeout_s=1e300"])
    err = capsys.readouterr().err
    assert code == 2 and "distributed.timeout_s" in err and "--set" in err
    assert "Traceback" not in err


def test_every_text_key_is_bounded_and_a_header_at_the_bounds_is_readable() -> None:
    raw: dict[str, dict[str, str]] = {}
    for section, key, meta in TEXT:
        limit = meta.get("max_len", TEXT_MAX)
        with pytest.raises(ConfigError, match=f"{section}.{key} is"):
            config_from_dict({section: {key: "x" * (limit + 1)}})
        raw.setdefault(section, {})[key] = "x" * limit
    cfg = config_from_dict(raw)
    header = json.dumps({"type": "header", "preset": cfg.name, "config": cfg.to_dict()})
    assert len(header.encode()) < PROBE_BYTES  # watch reads a first line up to this


def test_a_description_of_50_mb_is_refused_in_one_sentence(tmp_path: Path) -> None:
    preset = tmp_path / "big.toml"
    preset.write_text('[preset]\ndescription = "' + "x" * 2_000 + '"\n')
    with pytest.raises(ConfigError, match="preset.description is 2,000 characters long"):
        load_preset(str(preset))
    preset.write_text('[preset]\ndescription = "' + "x" * (50 << 20) + '"\n')
    with pytest.raises(ConfigError, match="is over 1024 KiB"):
        load_preset(str(preset))


@pytest.fixture
def user_presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    folder = tmp_path / "tuitrain" / "presets"
    folder.mkdir(parents=True)
    return folder


def test_list_presets_lists_broken_user_presets_as_unreadable(
    user_presets: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (user_presets / "scalar.toml").write_text("preset = 3\n")
    (user_presets / "descnum.toml").write_text("[preset]\ndescription = 5\n")
    (user_presets / "escapes.toml").write_text(
        '[preset]\ndescription = "a \\u001b[2J\\u001b]0;title\\u0007 b"\n'
    )
    (user_presets / "broken.toml").write_text("x = [\n")
    os.mkfifo(user_presets / "fifo.toml")  # listing must not wait for a writer
    (user_presets / "folder.toml").mkdir()
    monkeypatch.setenv("COLUMNS", "1000")  # one line each, however long the temp path
    assert main(["--list-presets"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()}
    for name in ("scalar", "descnum", "broken", "fifo", "folder"):
        assert "(unreadable:" in lines[name], lines[name]
    assert "must be a table" in lines["scalar"]
    assert "not a regular file" in lines["fifo"] and "not a regular file" in lines["folder"]
    assert "\x1b" not in out and "\x07" not in out
    assert "a [2J]0;title b" in lines["escapes"]
    assert "fashion-mini" in lines  # the shipped ones are still there


@pytest.mark.parametrize("kind", ["device", "directory", "fifo"])
def test_a_preset_that_is_not_a_regular_file(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if kind == "device":
        target = "/dev/null"
    elif kind == "directory":
        target = str(tmp_path)
    else:
        target = str(tmp_path / "p.toml")
        os.mkfifo(target)
    assert main(["--no-ui", "--preset", target]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a regular file" in err and "does not exist" not in err
    assert len(err.splitlines()) == 1


def test_a_set_error_names_set_and_a_file_error_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_preset("fashion-mini", ["optim.lr=99"])
    assert str(info.value).startswith("--set: optim.lr") and ".toml" not in str(info.value)
    bad = tmp_path / "mine.toml"
    bad.write_text("[optim]\nlr = 99\n")
    with pytest.raises(ConfigError) as info:
        load_preset(str(bad), ["train.epochs=2"])
    assert str(info.value).startswith("mine.toml: optim.lr")


def test_the_defaults_still_load() -> None:
    assert isinstance(config_from_dict({}), Config)
