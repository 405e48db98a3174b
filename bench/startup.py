"""Item 6: start-up: `tuitrain --help` wall time, the CLI import, and time to the first frame.

    python bench/startup.py --repeats 15

Runs each command as a fresh subprocess, round-robin (so load spikes hit every command
alike), --repeats times, and reports the median and min-max wall time:

* `python -c pass`: the interpreter floor on this machine;
* `python -c "import tuitrain.cli"`;
* `tuitrain --help` through the console script next to the interpreter (bin/tuitrain; the
  pyenv shim on PATH adds a bash start, reported separately when it exists);
* `tuitrain --list-presets`.

It also checks, in a child, which heavy modules `import tuitrain.cli` pulls in (torch,
textual, numpy must not be there) and lists the slowest imports from `-X importtime`.
Time to the first frame needs the Textual app (tuitrain/ui/app.py); without it the summary
says it was not measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import REPO, emit, machine, spread

HEAVY = ("torch", "textual", "numpy", "rich", "plotext", "torchvision")


def commands() -> dict[str, list[str]]:
    bin_dir = Path(sys.executable).parent
    script = bin_dir / "tuitrain"
    cmds = {
        "python_floor": [sys.executable, "-c", "pass"],
        "import_tuitrain_cli": [sys.executable, "-c", "import tuitrain.cli"],
        "tuitrain_help": [str(script), "--help"] if script.exists() else [],
        "python_m_tuitrain_help": [sys.executable, "-m", "tuitrain", "--help"],
        "tuitrain_list_presets": [sys.executable, "-m", "tuitrain", "--list-presets"],
    }
    shim = shutil.which("tuitrain")
    if shim and Path(shim).resolve() != script.resolve():
        cmds["tuitrain_help_via_PATH"] = [shim, "--help"]
    return {name: cmd for name, cmd in cmds.items() if cmd}


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def heavy_imports() -> dict[str, bool]:
    code = (
        "import sys, json, tuitrain.cli;"
        f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def slowest_imports(top: int = 8) -> list[dict[str, Any]]:
    """The slowest imports (cumulative microseconds) of `tuitrain --help`."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tuitrain", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative_us, name = line.split("|")
        depth = len(name) - len(name.lstrip())  # one space = imported at the top level
        if depth <= 1:
            rows.append({"module": name.strip(), "cumulative_ms": int(cumulative_us) / 1e3})
    rows.sort(key=lambda r: -r["cumulative_ms"])
    return rows[:top]


def first_frame() -> dict[str, Any]:
    if not (REPO / "tuitrain" / "ui" / "app.py").exists():
        return {"measured": False, "why": "tuitrain/ui/app.py does not exist yet (UI in progress)"}
    return {"measured": False, "why": "see bench/ui_overhead.py (measured with the UI bench)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    cmds = commands()
    for cmd in cmds.values():  # warm the page cache and .pyc files once
        wall(cmd)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for r in range(args.repeats):
        names = list(cmds) if r % 2 == 0 else list(reversed(cmds))
        for name in names:
            times[name].append(wall(cmds[name]))
    emit(
        {
            "item": "6 start-up",
            "machine": machine(),
            "command": " ".join(["python bench/startup.py", *sys.argv[1:]]),
            "commands": {name: " ".join(cmd) for name, cmd in cmds.items()},
            "wall_ms": {name: spread([1e3 * t for t in ts], 1) for name, ts in times.items()},
            "heavy_modules_after_import_tuitrain_cli": heavy_imports(),
            "slowest_imports_of_help": slowest_imports(),
            "first_frame": first_frame(),
            "goal": "tuitrain --help < 500 ms",
        }
    )


if __name__ == "__main__":
    main()
