"""The command table: `tuitrain --help` lists every command, and each verb reaches its module."""

from __future__ import annotations

import importlib

import pytest

from tuitrain.cli import main
from tuitrain.commands import COMMANDS
from tuitrain.commands.train import build_parser


def test_help_lists_every_command() -> None:
    text = build_parser().format_help()
    for verb in COMMANDS:
        assert f"tuitrain {verb} --help" in text
    assert {"watch", "run", "runs", "parity", "export", "gate"} <= set(COMMANDS)


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_each_verb_reaches_its_modules_main(verb: str, capsys: pytest.CaptureFixture) -> None:
    module = importlib.import_module(COMMANDS[verb][0])
    assert callable(module.main)
    try:
        code = main([verb, "--help"])
    except SystemExit as done:  # argparse's own exit, or the command's return value
        code = done.code
    assert code == 0
    assert f"tuitrain {verb}" in capsys.readouterr().out
