"""The README is a user guide that opens with two commands that must work on a fresh machine
(CI runs the second); the reference and the guarantees live in docs/, linked from it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GENERATED = {"cli.md", "config.md"}  # scripts/gen_docs.py writes these two

# The guide's sections, in the order a newcomer needs them (the issue: a user guide first).
GUIDE = [
    "Quick start",
    "The dashboard",
    "Headless",
    "Watch a run",
    "Your own script",
    "Runs, compare, gate",
    "Checkpoints and resume",
    "Several processes",
    "Presets",
    "Reference",
]


def opening_commands() -> list[str]:
    """The bash blocks before the first section: the two commands open the README."""
    head = README[: README.index("\n## ")]
    return re.findall(r"```bash\n(.+?)\n```", head, flags=re.S)


def test_the_readme_opens_with_exactly_the_two_commands() -> None:
    assert len(opening_commands()) == 2, opening_commands()


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


def test_both_opening_commands_pick_the_torch_build_first() -> None:
    """A CPU-only machine must not get PyPI's 5.5 GB CUDA build from the first command: the
    script that picks the build runs before pip installs the package (and torch with it)."""
    for command in opening_commands()[:2]:
        pick = command.find(".venv/bin/python scripts/install_torch.py")
        assert 0 <= pick < command.index(".venv/bin/pip install"), command


def test_the_readme_is_the_user_guide_in_its_order() -> None:
    sections = re.findall(r"^## (.+)$", README, flags=re.M)
    assert sections == GUIDE, sections
    lines = len(README.splitlines())
    assert lines <= 500, f"the README is {lines} lines: move reference or guarantees to docs/"


def test_the_reference_list_links_every_docs_page() -> None:
    reference = README[README.index("\n## Reference") :]
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    unlinked = [name for name in pages if f"](docs/{name})" not in reference]
    assert not unlinked, f"docs pages the README's Reference list does not link: {unlinked}"
