"""Values that used to end in a traceback ("looks like a bug", exit 1) or do something odd:
each is now one sentence and exit 2 (issue 19, point 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuitrain.core.config import ConfigError, load_preset, overrides_from

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("override", "words"),
    [
        pytest.param("optim.lr=" + "1" * 400, "optim.lr = 1111", id="lr-400-digits"),
        pytest.param("model.dropout=" + "9" * 400, "is not a finite number", id="dropout-400"),
        pytest.param("train.epochs=" + "9" * 5000, "too many digits", id="epochs-5000-digits"),
        ('run.run_dir="/tmp/x\\u0000y"', "holds a control character ('\\x00')"),
        ('run.run_dir="/tmp/a', "the value is not valid TOML"),  # was taken as the text "/tmp/a
        ("train.seed=99999999999999999999", "it must be <= 4294967295"),
        ("data.num_classes=99999999999999999999", "it must be <= 1048576"),
        ("train.max_steps=2147483648", "it must be <= 2147483647"),
    ],
)
def test_a_bad_override_is_one_sentence(override: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_preset("fashion-mini", [override])
    message = str(caught.value)
    assert words in message and "\n" not in message and len(message) < 300


def test_a_preset_file_with_a_huge_number(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("[train]\nepochs = " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match="holds a number with too many digits"):
        load_preset(str(path))


def test_flag_values_keep_their_characters() -> None:
    """A flag's text becomes a TOML string with JSON's escapes: quotes and backslashes survive,
    and a newline is no longer cut into a different path."""
    cfg = load_preset("fashion-mini", overrides_from([("run.run_dir", '/tmp/q"uote\\x')]))
    assert cfg.run.run_dir == '/tmp/q"uote\\x'
    with pytest.raises(ConfigError, match="control character"):
        load_preset("fashion-mini", overrides_from([("run.run_dir", "/tmp/a\nb")]))


def test_a_run_dir_with_a_newline_writes_nothing(tmp_path: Path) -> None:
    """`--run-dir $'/tmp/…\\nx'` used to become the literal text with its quotes: a folder
    named `"` appeared in the current directory and the run went on there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUITRAIN_NO_DOWNLOAD": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tuitrain", "--no-ui", "--max-steps", "1",
         "--run-dir", f"{tmp_path}/nl\nx"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "holds a control character" in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


LONG = "/tmp/" + "a" * 300  # one name over NAME_MAX: the system refuses to look it up


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--preset", LONG + ".toml"], id="preset"),
        pytest.param(["--resume", LONG], id="resume"),
        pytest.param(["--resume", "auto", "--run-dir", LONG], id="resume-auto-run-dir"),
        pytest.param(["--run-dir", LONG], id="run-dir"),
        pytest.param(["--data-dir", LONG], id="data-dir"),
    ],
)
def test_a_path_the_system_refuses_is_one_sentence(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Path.is_file() raises for a name too long (ENAMETOOLONG): it ended in a traceback."""
    from tuitrain.cli import main

    assert main(["--no-ui", "--max-steps", "1", *args]) == 2
    err = capsys.readouterr().err
    assert "cannot be looked up (File name too long); pass another path." in err
    assert err.count("\n") == 1


def test_watch_and_tuitrain_data_with_a_path_the_system_refuses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuitrain.commands.watch import main as watch_main
    from tuitrain.core.errors import UserError
    from tuitrain.engine.data.idx import locate_fashion_mnist

    assert watch_main([LONG]) == 2
    assert "watch target /tmp/aaa" in capsys.readouterr().err
    monkeypatch.setenv("TUITRAIN_DATA", LONG)
    with pytest.raises(UserError, match="TUITRAIN_DATA /tmp/aaa.* cannot be looked up"):
        locate_fashion_mnist()


def test_an_empty_resume_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """`--resume ''` used to be ignored: a fresh run started."""
    from tuitrain.cli import main

    assert main(["--no-ui", "--resume", ""]) == 2
    assert "--resume is empty" in capsys.readouterr().err


def test_idx_dimensions_whose_product_wraps(tmp_path: Path) -> None:
    """2^22 x 2^21 x 2^21 is 2^64: numpy's int64 product wrapped to 0, so a 16-byte file
    passed the length check and reshape failed ("numel: integer multiplication overflow")."""
    import struct

    from tuitrain.core.errors import UserError
    from tuitrain.engine.data.idx import read_idx

    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(bytes([0, 0, 8, 3]) + struct.pack(">III", 2**22, 2**21, 2**21))
    with pytest.raises(UserError, match="implies"):
        read_idx(path, 3)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--seed", "1.5"], id="tuitrain"),
        pytest.param(["watch", "--poll", "x"], id="watch"),
        pytest.param(["export", "--bogus"], id="export"),
        pytest.param(["parity", "--bogus"], id="parity"),
    ],
)
def test_a_bad_flag_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse printed its usage (several lines) before the error; now one line, exit 2."""
    from tuitrain.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's exit (parity returns it instead)
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "--help)" in err, err


def test_synthetic_sizes_are_bounded() -> None:
    """2^31-1 synthetic val samples built 16 GiB of labels (and as many indices per eval)."""
    with pytest.raises(ConfigError, match="too many synthetic samples; it must be <= 16777216"):
        load_preset(
            "fashion-mini",
            ["data.name='synthetic'", "data.loader='device'", "data.val_samples=2147483647"],
        )
    cfg = load_preset(
        "fashion-mini", ["data.name='synthetic'", "data.loader='device'", "data.val_samples=4096"]
    )
    assert cfg.data.val_samples == 4096
