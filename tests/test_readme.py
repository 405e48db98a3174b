"""The README opens with two commands that must work on a fresh machine; CI runs the second."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def opening_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    head = text[: text.index("## Presets")]
    return re.findall(r"```bash\n(.+?)\n```", head, flags=re.S)


def test_ci_runs_the_readme_test_command_word_for_word() -> None:
    install_and_run, install_and_test = opening_commands()[:2]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install_and_test in ci_lines
    assert "pytest" in install_and_test and "tuitrain" in install_and_run


def test_opening_commands_need_no_sudo_binary_and_use_a_venv() -> None:
    """As root on a bare machine there is no sudo; a user has one: `$(command -v sudo)` is
    empty for the first and sudo for the second. PEP 668 systems refuse a global pip."""
    for command in opening_commands()[:2]:
        assert re.search(r"(?<![(\w-])sudo ", command) is None, command  # no bare `sudo `
        assert "python3 -m venv .venv" in command and ".venv/bin/pip install" in command
        assert not re.search(r"(^|&& )pip ", command), command
    assert "$(command -v sudo) apt-get" in opening_commands()[1]
