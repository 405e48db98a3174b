"""The suite collects the same tests every time: pytest-xdist's two workers each collect it
and refuse to start when their lists differ (a parametrization drawn from the clock or from
os.urandom did that: a gzip header's mtime, random bytes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def collected() -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p",
         "no:cacheprovider", "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_two_collections_a_second_apart_list_the_same_tests() -> None:
    first = collected()
    time.sleep(1.1)  # a value taken from the clock (seconds) differs by now
    second = collected()
    assert len(first) > 1000
    assert first == second, sorted(set(first) ^ set(second))[:5]
