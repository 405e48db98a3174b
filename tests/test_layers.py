"""The layers' import contract (DESIGN: dependencies point down only), read from the source,
and a headless run on a machine where Textual cannot be imported at all."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tuitrain"
UI_LIBS = ("textual", "textual_plotext", "plotext", "rich")
ABOVE_ENGINE = (
    "tuitrain.ui",
    "tuitrain.host",
    "tuitrain.client",
    "tuitrain.commands",
    "tuitrain.cli",
)
# DESIGN's layers, top to bottom: each imports only the layers below it (tuitrain itself, the
# package's lazy face, sits beside them)
LAYERS = ("cli", "commands", "ui", "host", "client", "engine", "rundir", "metrics", "core")


def imports(path: Path, module_level_only: bool = False) -> Iterator[str]:
    """Every module `path` imports (absolute names; relative imports are not used here)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.If) and module_level_only:  # `if TYPE_CHECKING:` is fine
            continue


def modules(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (PKG / part).rglob("*.py")) if parts else []


def top(name: str) -> str:
    return name.split(".")[0]


def offenders(paths: list[Path], banned: tuple[str, ...], module_level_only: bool = False):
    found = []
    for path in paths:
        for name in imports(path, module_level_only):
            if top(name) in banned or any(name == b or name.startswith(b + ".") for b in banned):
                found.append(f"{path.relative_to(PKG.parent)} imports {name}")
    return found


def test_engine_and_metrics_never_import_the_ui_or_what_sits_above_them() -> None:
    below = modules("engine", "metrics", "core")
    assert len(below) > 20
    assert offenders(below, UI_LIBS + ABOVE_ENGINE) == []


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tuitrain" or len(parts) == 1:
        return None
    faces = {"wandb": "client", "trackio": "client", "lightning": "client", "hf": "client"}
    return {"__main__": "cli", **faces}.get(parts[1], parts[1])


def test_each_layer_imports_only_the_layers_below_it() -> None:
    """Lazy imports included, except the launcher's one (rank 0 of a torchrun job draws the
    dashboard): no command and its screen import each other, the engine knows no host."""
    found = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        mine = layer("tuitrain." + ".".join(rel.with_suffix("").parts))
        if mine not in LAYERS:
            continue
        for name in imports(path):
            theirs = layer(name)
            if theirs in LAYERS and LAYERS.index(theirs) < LAYERS.index(mine):
                found.append(f"{rel} ({mine}) imports {name} ({theirs})")
    assert found == ["host/launch.py (host) imports tuitrain.ui.app (ui)"], found


def test_the_host_and_headless_path_never_import_textual() -> None:
    """host, signals, stdio and the headless launcher: not even a lazy import of the UI,
    except launch.run_ui_rank0 (rank 0 of a torchrun job with a terminal draws the app)."""
    paths = [PKG / "host" / name for name in ("run.py", "signals.py", "stdio.py")]
    paths.append(PKG / "commands" / "parity.py")
    assert offenders(paths, UI_LIBS + ("tuitrain.ui",)) == []
    launch = offenders([PKG / "host" / "launch.py"], UI_LIBS + ("tuitrain.ui",))
    assert launch == ["tuitrain/host/launch.py imports tuitrain.ui.app"], launch
    entries = (PKG / "cli.py", PKG / "host" / "launch.py", PKG / "commands" / "watch.py")
    for entry in entries:  # lazily, at most
        assert offenders([entry], UI_LIBS + ("tuitrain.ui",), module_level_only=True) == []


def test_records_and_metrics_are_torch_free() -> None:
    assert offenders(modules("metrics"), ("torch",)) == []


def test_the_ui_imports_torch_only_lazily() -> None:
    """The dashboard's first frame must not wait for torch: the engine thread imports it."""
    assert offenders(modules("ui"), ("torch",), module_level_only=True) == []


BLOCK = """
import sys
from importlib.abc import MetaPathFinder

class NoUI(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not installed here (test)")
        return None

sys.meta_path.insert(0, NoUI())
from tuitrain.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r})
print("UI modules loaded:", loaded, flush=True)
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_ui_runs_to_completion_without_textual(tmp_path: Path) -> None:
    code = BLOCK.format(blocked=set(UI_LIBS))
    argv = ["--no-ui", "--max-steps", "4", "--set", "data.train_samples=512"]
    argv += ["--set", "data.val_samples=256", "--run-dir", str(tmp_path / "run")]
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "end   completed" in proc.stdout and "UI modules loaded: []" in proc.stdout
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
