"""The wheel carries the presets and the Fashion-MNIST subset: install it, run it elsewhere."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_install_lists_presets_from_another_directory(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # The new venv sees this interpreter's site-packages (torch, textual: no 5 GB reinstall)
    # through a .pth line, whether the suite runs in a venv or not (--system-site-packages
    # would give it the base interpreter's, without torch, when the suite runs in a venv).
    # Paths listed in a .pth are added as they are: the editable checkout's own .pth in
    # there is not processed, so the wheel installed below is what the venv imports.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    venv_site = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(venv_site) / "outer_site.pth").write_text("\n".join(ours) + "\n")
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next(wheel_dir.glob("tuitrain-*.whl"))
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    pip += ["install", "-q", "--no-deps", str(wheel)]
    subprocess.run(pip, check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [str(venv / "bin" / "tuitrain"), "--list-presets"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "fashion-mini" in proc.stdout and "resnet18-synth-bf16" in proc.stdout
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import tuitrain.core.config as c, tuitrain.engine.data.fashion as d;"
            "print(c.shipped_presets_dir()); print(d.MINI_DIR)",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(str(venv) in path for path in where), where
    assert (Path(where[1]) / "LICENSE").is_file()
    assert (Path(where[1]) / "train-images-idx3-ubyte.gz").is_file()
