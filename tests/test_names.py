"""Names spelled once: a run dir's files and folders only in `tuitrain.rundir.layout`, and the
classifier's accuracy field only in the classify task and the contract (every other reader
takes a metric's name from the header's task declaration, or the contract's constant).
Read from the source, as tests/test_layers.py reads the imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tuitrain.rundir import layout

PKG = Path(__file__).resolve().parents[1] / "tuitrain"
LAYOUT = PKG / "rundir" / "layout.py"
FILE_NAMES = (
    layout.METRICS_NAME, layout.CONFIG_NAME, layout.TRAIN_LOG, layout.OUTPUT_LOG,
    layout.LOCK_NAME, layout.RANKS_LOCK_NAME, layout.RUN_LOCK_NAME, layout.MANIFEST_NAME,
    layout.NATIVE_STDERR, layout.UI_TRACEBACK, layout.PARITY_JSON, layout.PARITY_LOG,
)  # fmt: skip
FOLDER_NAMES = (
    layout.CKPT_DIR, layout.TENSORBOARD_DIR, layout.CONTROL_DIR, layout.RANKS_DIR,
    layout.STACKS_DIR, layout.PARITY_DIR,
)  # fmt: skip
ACCURACY = re.compile(r"(?<![A-Za-z])val_acc(?![A-Za-z])")  # not trackio's val_accuracy
ACCURACY_HOMES = ("engine/tasks/classify.py", "metrics/records.py")
# Files left out of the checks below while their names move into the layout (none now: keep
# it empty; a file put here must say why).
PENDING: set[str] = set()  # files whose names are still to move into the layout: none


def sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if rel(p) not in PENDING)


def rel(path: Path, root: Path = PKG) -> str:
    return path.relative_to(root).as_posix()


def spells(name: str, text: str) -> bool:
    """`name` in `text` as a name of its own (train.log, not train.log_every)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and its functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def spelled_names(path: Path, root: Path = PKG) -> list[str]:
    """Where `path`'s code spells a run dir's name: a text (an f-string's parts too, never a
    docstring) holding a file's name, a path joined with a folder's name (`dir / "stacks"`,
    `p.name == "checkpoints"`), or a CONSTANT set to one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{rel(path, root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [f"{where} {name}" for name in FILE_NAMES if spells(name, node.value)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if isinstance(right, ast.Constant) and right.value in FOLDER_NAMES:
                found.append(f"{where} / {right.value!r}")
        if isinstance(node, ast.Compare) and getattr(node.left, "attr", None) == "name":
            for other in node.comparators:
                if isinstance(other, ast.Constant) and other.value in FOLDER_NAMES:
                    found.append(f"{where} .name == {other.value!r}")
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            constant = any(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
            if constant and node.value.value in FOLDER_NAMES:
                found.append(f"{where} = {node.value.value!r}")
    return found


def test_only_the_layout_spells_a_run_dirs_names() -> None:
    paths = [p for p in sources() if p != LAYOUT]
    assert len(paths) > 100
    found = [hit for path in paths for hit in spelled_names(path)]
    assert found == [], found


def test_the_metrics_file_is_named_once() -> None:
    """The issue's check, literally: its name appears in one line of the package (docstrings
    say "the metrics file")."""
    lines = [
        f"{rel(path)}:{n}"
        for path in sources()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if layout.METRICS_NAME in line
    ]
    definition = next(
        n for n, line in enumerate((PKG / "rundir/layout.py").read_text().splitlines(), 1)
        if line.startswith("METRICS_NAME = ")
    )  # fmt: skip
    assert lines == [f"rundir/layout.py:{definition}"], lines


def test_the_check_sees_each_way_of_spelling_a_name(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""A docstring may say metrics.jsonl."""\n'
        "from pathlib import Path\n"
        'a = Path("r") / "metrics.jsonl"\n'
        'b = f"{a} and train.log"\n'
        'c = Path("r") / "stacks"\n'
        'd = a.name == "checkpoints"\n'
        'E = "control"\n'
        'f = "control"  # a parity run is named control: a word, not a path\n'
    )
    found = sorted(spelled_names(planted, tmp_path))
    assert found == ["planted.py:3 metrics.jsonl", "planted.py:4 train.log",
                     "planted.py:5 / 'stacks'", "planted.py:6 .name == 'checkpoints'",
                     "planted.py:7 = 'control'"]  # fmt: skip


def test_only_the_classify_task_and_the_contract_name_the_accuracy() -> None:
    """Readers take the primary metric's name, goal and format from the header's task
    declaration (`records.task_declaration`) or the task object; where one needs the
    classifier's accuracy itself, the contract exports it (records.CLASSIFY_PRIMARY)."""
    found = [
        f"{rel(path)}:{n}"
        for path in sorted(PKG.rglob("*"))
        if path.is_file() and path.suffix in (".py", ".tcss", ".toml", ".md")
        and rel(path) not in ACCURACY_HOMES and rel(path) not in PENDING
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ACCURACY.search(line)
    ]  # fmt: skip
    assert found == [], found


def write_run(run_dir: Path, recs: list[dict]) -> Path:
    import json

    run_dir.mkdir()
    (run_dir / layout.METRICS_NAME).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run_dir


def test_a_run_reads_by_its_own_declarations_in_the_store_panels_and_export(
    tmp_path: Path,
) -> None:
    """A charlm run (its header declares val_loss and val_bpc, in units of their own) and a
    script's run through the client (it declares nothing; its `val/acc` is the contract's
    accuracy, a share): each series, its format and each CSV column as the run says."""
    import csv

    from tests.ui.fake_records import charlm_records, script_records, store_of
    from tuitrain.commands.export import main as export
    from tuitrain.ui.panels import all_metric_specs, metric_text

    for recs, name, value, shown, absent in (
        (charlm_records(), "val_bpc", 2.0, "2.000", "val_acc"),
        (script_records(), "val_acc", 0.8531, "85.31%", "val_bpc"),
    ):
        snap = store_of(recs).snapshot()
        assert name in snap.series and absent not in snap.series
        (spec,) = [s for s in all_metric_specs(snap) if s["name"] == name]
        assert metric_text(value, spec) == shown
        run_dir = write_run(tmp_path / name, recs)
        out = tmp_path / f"{name}.csv"
        assert export([str(run_dir), "--format", "csv", "--out", str(out)]) == 0
        rows = list(csv.DictReader(out.open()))
        assert name in rows[0] and absent not in rows[0]
        evals = [r for r in rows if r["type"] == "eval"]
        assert [float(r[name]) for r in evals] == [r[name] for r in recs if r.get("type") == "eval"]
