"""The layers' import contract (DESIGN: dependencies point down only), read from the source,
and a headless run on a machine where Textual cannot be imported at all."""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imports(path: Path, module_level_only: bool = False) -> Iterator[str]:
    """Every module `path` imports (absolute names; relative imports are not used here)."""
    tree = parsed(path)
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


def runtime_imports(path: Path) -> Iterator[tuple[str, list[str]]]:
    """What `imports` reads (module-level and lazy), less the `if TYPE_CHECKING:` blocks, with
    the names each `from M import a, b` takes (a name may be a module: `from pkg import mod`)."""
    stack: list[ast.AST] = [parsed(path)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)  # annotations only: the body never runs
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [alias.name for alias in node.names]
        stack.extend(ast.iter_child_nodes(node))


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the layers -> the package's modules it imports. An import names the module it
    names: `from a.b import c` is a.b.c where that is a module, else a.b; the parent packages a
    dotted import also runs are not edges (a package's __init__ re-exporting its modules is no
    circle). The package's lazy face (`tuitrain`, beside the layers: tuitrain.init loads the
    client on first use) is left out."""
    paths = {module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        if layer(name) not in LAYERS:
            continue
        edges = graph.setdefault(name, set())
        for module, taken in runtime_imports(path):
            for target in [f"{module}.{t}" for t in taken if f"{module}.{t}" in paths] or [module]:
                if target in paths and target != name and layer(target) in LAYERS:
                    edges.add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_circles_finds_a_planted_one_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set(), "f": {"f"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"x": {"y"}, "y": {"x"}, "z": {"x"}}) == [["x", "y"]]


def test_no_circle_of_imports_inside_a_layer() -> None:
    """No two modules import each other, directly or round a longer loop, lazily or not (a lazy
    import that closes a circle is a layering bug put off to run time): each circle is listed."""
    graph = import_graph()
    assert len(graph) > 80 and "tuitrain.rundir.state" in graph["tuitrain.rundir.summary"]
    found = [" <-> ".join(f"{m.replace('.', '/')}.py" for m in c) for c in circles(graph)]
    assert found == [], found


RUN_FILE_NAMES = {  # a run dir's files: spelled only in tuitrain/rundir/
    "metrics.jsonl",
    "train.log",
    "output.log",
    "config.toml",
    ".tuitrain.lock",
    ".tuitrain.ranks.lock",
    ".tuitrain-runs.jsonl",
}
RUN_FILE_PREFIXES = (
    "profile-step",
    "memory-snapshot-step",
)  # a step's files: f"profile-step{s}.txt"
RUN_FOLDER_NAMES = {"checkpoints", "tensorboard", "stacks", "control", "ranks"}  # also plain words
PATH_MAKERS = {"Path", "PurePath", "join", "joinpath", "with_name"}  # Path(a, "x"), os.path.join
# The reader's line-level parts: a module outside rundir/ holding them could parse the run's
# files itself (the layout's name constants may be imported: that is the one definition)
RUNDIR_PIECES = {
    "tuitrain.rundir.read": {
        "classify_line",
        "parse_line",
        "parse_lines",
        "read_tail",
        "TAIL_BYTES",
        "TAIL_MAX_BYTES",
        "MAX_LINE_BYTES",
    },
}


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the module's, classes' and functions' docstring constants."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def run_file_spellings(path: Path, root: Path = PKG.parent) -> list[str]:
    """Where `path` spells a run dir's file or folder name as code (see the test below)."""
    tree = parsed(path)
    skip = docstrings(tree)
    as_path_part: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            as_path_part.add(id(node.right))
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in PATH_MAKERS:
                as_path_part.update(id(arg) for arg in node.args)
        elif isinstance(node, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr == "name"
            for side in (node.left, *node.comparators)
        ):
            as_path_part.update(id(side) for side in (node.left, *node.comparators))
        elif isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id.isupper() for t in node.targets
        ):
            as_path_part.add(id(node.value))  # a constant of its own: RANKS_DIR = "ranks"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        text = node.value
        if not isinstance(text, str):
            continue
        last = text.rsplit("/", 1)[-1]
        is_file = (last in RUN_FILE_NAMES or last.startswith(RUN_FILE_PREFIXES)) and not any(
            c.isspace() for c in text
        )
        if is_file or (text in RUN_FOLDER_NAMES and id(node) in as_path_part):
            found.append((node.lineno, node.col_offset, text))
    return [f"{path.relative_to(root)}:{line} spells {text!r}" for line, _, text in sorted(found)]


def rundir_pieces_taken(path: Path, root: Path = PKG.parent) -> list[str]:
    return [
        f"{path.relative_to(root)} imports {name} from {module}"
        for module, taken in runtime_imports(path)
        for name in sorted(set(taken) & RUNDIR_PIECES.get(module, set()))
    ]


def test_only_the_rundir_package_names_or_opens_the_run_dirs_files() -> None:
    """DESIGN: nothing reads a run's files but the reader, and the run dir's layout is named
    once (rundir.layout). Outside tuitrain/rundir/, so that a second opener cannot creep in:

    - no string constant (docstrings aside) is a run file's name (metrics.jsonl, train.log,
      output.log, config.toml, the two locks, the manifest), alone or as a path's last part
      ("runs/a/metrics.jsonl"); text with spaces (a message naming the file) is not code;
    - no folder's name (checkpoints, tensorboard, stacks, control, ranks: also plain words, as
      a record's kind or a dict key) is used as a path part: right of `/`, an argument of
      Path()/os.path.join()/.joinpath()/.with_name(), compared with a `.name`, or bound to a
      constant of its own (RANKS_DIR = "ranks");
    - no module imports the reader's line-level parts (classify_line, parse_line,
      parse_lines, read_tail and their sizes): what it reads is what the reader's own
      functions (read_records, LineTail, last_records, summarize_run, run_end, output_tail,
      JsonlFollower) give. The layout's constants (METRICS_NAME ...) are the one spelling of
      each name; taking them to name a file in a message or a path is allowed.

    A module that opens RunDir(path).metrics itself still passes: the rule reads names, not
    what a call does with a path."""
    outside = [p for p in PKG.rglob("*.py") if "rundir" not in p.relative_to(PKG).parts]
    assert len(outside) > 80
    found = [hit for path in sorted(outside) for hit in run_file_spellings(path)]
    found += [hit for path in sorted(outside) for hit in rundir_pieces_taken(path)]
    assert found == [], "\n".join(found)


def test_the_run_file_rule_catches_a_second_opener(tmp_path: Path) -> None:
    """The rule above, on planted modules: one that opens metrics.jsonl itself fails it, and the
    same words as a record's kind, a dict key or a message pass."""
    bad = tmp_path / "tuitrain" / "commands" / "peek.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        '"""Reads metrics.jsonl."""\n'
        "from pathlib import Path\n"
        "from tuitrain.rundir.read import classify_line, run_target\n"
        "import os\n"
        "RANKS_DIR = 'ranks'\n"
        "def peek(run):\n"
        "    a = open(Path(run) / 'metrics.jsonl')\n"
        "    b = Path(run, 'stacks')\n"
        "    c = os.path.join(run, 'checkpoints')\n"
        "    d = run.parent.name == 'checkpoints'\n"
        "    e = f'{run}/train.log'\n"
        "    g = run / f'memory-snapshot-step{e}.pickle'\n"
        "    return {'control': 1, 'kind': 'ranks'}, 'no metrics.jsonl in RUN'\n"
    )
    spelled = run_file_spellings(bad, tmp_path)
    assert spelled == [
        "tuitrain/commands/peek.py:5 spells 'ranks'",
        "tuitrain/commands/peek.py:7 spells 'metrics.jsonl'",
        "tuitrain/commands/peek.py:8 spells 'stacks'",
        "tuitrain/commands/peek.py:9 spells 'checkpoints'",
        "tuitrain/commands/peek.py:10 spells 'checkpoints'",
        "tuitrain/commands/peek.py:11 spells '/train.log'",
        "tuitrain/commands/peek.py:12 spells 'memory-snapshot-step'",
    ], spelled
    taken = rundir_pieces_taken(bad, tmp_path)
    assert taken == ["tuitrain/commands/peek.py imports classify_line from tuitrain.rundir.read"]
