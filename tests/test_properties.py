"""Property tests (Hypothesis): generated presets, overrides, IDX files, checkpoints and
metrics records thrown at the loaders and the command line. Every outcome is either success
or a UserError (exit 2) of one line; nothing ends in a traceback "looks like a bug".

Sizes: in-process properties run 60-200 examples (milliseconds each); the ones that train
(one step of the shipped mini data, ~1 s each) run 12. Examples are derandomized so that CI
sees the same cases every time; a failure prints the smallest example Hypothesis found.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import struct
import tempfile
import typing
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tuitrain.core.config import INT_MAX, SECTIONS, ConfigError, config_from_dict, load_preset
from tuitrain.core.errors import UserError
from tuitrain.engine.checkpoint import CheckpointError, find_latest, load_checkpoint
from tuitrain.engine.data.idx import read_idx, read_split
from tuitrain.engine.state import SOURCE_KEY, check_resumable
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower

FAST = settings(max_examples=150, deadline=None, derandomize=True)
SLOW = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

KEYS = {section: [f.name for f in dataclasses.fields(cls)] for section, cls in SECTIONS.items()}

# Values that break things: huge and negative ints, non-finite floats, wrong types.
INTS = st.one_of(
    st.integers(-3, 5),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32, 2**63, 2**64, 10**30, -(2**63)]),
    st.integers(),
)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1e308]))
SCALARS = st.one_of(INTS, FLOATS, st.booleans(), st.text(max_size=12))
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=4), SCALARS, max_size=2),
)


def one_line(text: str) -> bool:
    return bool(text.strip()) and "\n" not in text.strip() and "Traceback" not in text


@st.composite
def raw_configs(draw: st.DrawFn) -> dict[str, Any]:
    """TOML-shaped dicts: mostly known sections and keys, some unknown, any values."""
    raw: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from([*KEYS, "bogus"]), max_size=4, unique=True)):
        keys = KEYS.get(section, ["x"])
        chosen = draw(st.lists(st.sampled_from([*keys, "bogus_key"]), max_size=4, unique=True))
        raw[section] = {key: draw(VALUES) for key in chosen}
    if draw(st.booleans()):
        raw[draw(st.sampled_from(list(KEYS)))] = draw(SCALARS)  # a section that is no table
    return raw


def check_bounds(cfg: Any) -> None:
    """A config that validates holds only values the engine can take."""
    for section in KEYS:
        for f in dataclasses.fields(getattr(cfg, section)):
            value = getattr(getattr(cfg, section), f.name)
            if isinstance(value, bool):
                continue
            if isinstance(value, int):
                assert -INT_MAX <= value <= 2**32, f"{section}.{f.name} = {value}"
            if isinstance(value, float):
                assert math.isfinite(value), f"{section}.{f.name} = {value}"


# --------------------------------------------------------------------------- presets, overrides


@FAST
@given(raw_configs())
def test_a_config_validates_or_is_refused_in_one_sentence(raw: dict[str, Any]) -> None:
    try:
        cfg = config_from_dict(raw)
    except ConfigError as exc:
        assert one_line(str(exc))
        return
    check_bounds(cfg)
    assert config_from_dict(cfg.to_dict()) == cfg  # what a run writes reads back the same


@FAST
@given(st.text(max_size=40))
def test_any_override_text_applies_or_is_refused_in_one_sentence(text: str) -> None:
    try:
        cfg = load_preset("fashion-mini", [text])
    except UserError as exc:
        assert one_line(str(exc))
        return
    check_bounds(cfg)


OVERRIDE_KEYS = [f"{s}.{k}" for s, keys in KEYS.items() for k in keys]


@FAST
@given(st.sampled_from(OVERRIDE_KEYS), SCALARS)
def test_every_key_with_any_value(key: str, value: Any) -> None:
    literal = (
        json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    )
    try:
        cfg = load_preset("fashion-mini", [f"{key}={literal}"])
    except UserError as exc:
        assert one_line(str(exc))
        return
    check_bounds(cfg)


@FAST
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_a_preset_file_of_any_bytes(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mine.toml"
        path.write_bytes(content)
        try:
            cfg = load_preset(str(path))
        except UserError as exc:
            assert one_line(str(exc))
            return
        check_bounds(cfg)


# --------------------------------------------------------------------------- IDX files


@st.composite
def idx_files(draw: st.DrawFn) -> bytes:
    """Mostly plausible headers (magic 0 0 08 ndim, dims) with payloads near the right size."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=64))
    magic = draw(st.sampled_from([b"\x00\x00", b"\x00\x01", b"\x1f\x8b"]))
    dtype = draw(st.sampled_from([8, 8, 8, 9, 0x0D]))
    ndim = draw(st.sampled_from([0, 1, 3, 3, 4, 255]))
    dims = [
        draw(st.sampled_from([0, 1, 2, 3, 28, 2**16, 2**31, 2**32 - 1]))
        for _ in range(min(ndim, 4))
    ]
    header = magic + bytes([dtype, ndim]) + b"".join(struct.pack(">I", d) for d in dims)
    size = math.prod(dims) if dims else 0
    length = (
        draw(st.sampled_from([size, size - 1, size + 1, 0]))
        if size < 4096
        else draw(st.integers(0, 64))
    )
    return header + bytes(max(length, 0))


@FAST
@given(idx_files(), st.sampled_from([None, 1, 3]))
def test_an_idx_file_reads_or_is_refused_in_one_sentence(content: bytes, ndim: int | None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x-idx3-ubyte"
        path.write_bytes(content)
        try:
            tensor = read_idx(path, ndim)
        except UserError as exc:
            assert one_line(str(exc))
            return
        assert tensor.dtype == torch.uint8 and tensor.numel() == len(content) - 4 - 4 * content[3]


def _idx(shape: tuple[int, ...]) -> bytes:
    return (
        bytes([0, 0, 8, len(shape)])
        + b"".join(struct.pack(">I", d) for d in shape)
        + bytes(math.prod(shape))
    )


@FAST
@given(
    st.tuples(st.integers(0, 5), st.integers(1, 30), st.integers(1, 30)),
    st.integers(0, 6),
    st.tuples(st.integers(0, 5), st.integers(1, 30), st.integers(1, 30)),
    st.integers(0, 6),
)
def test_a_fashion_folder_of_any_shapes(
    train: tuple[int, int, int], train_labels: int, val: tuple[int, int, int], val_labels: int
) -> None:
    """Images and labels of differing counts or image sizes are refused by name."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "train-images-idx3-ubyte").write_bytes(_idx(train))
        (folder / "train-labels-idx1-ubyte").write_bytes(_idx((train_labels,)))
        (folder / "t10k-images-idx3-ubyte").write_bytes(_idx(val))
        (folder / "t10k-labels-idx1-ubyte").write_bytes(_idx((val_labels,)))
        for split, shape, labels in (("train", train, train_labels), ("val", val, val_labels)):
            try:
                images, targets = read_split(folder, split)
            except UserError as exc:
                assert one_line(str(exc))
                continue
            assert len(images) == len(targets) == shape[0] == labels and images.numel() > 0


# --------------------------------------------------------------------------- metrics records

RECORD_TYPES = ["header", "train", "eval", "event", "end", "parity", "bogus"]
FIELDS = ["step", "epoch", "loss", "lr", "samples_per_s", "step_time_s", "data_wait_s",
          "val_acc", "val_loss", "level", "message", "kind", "status", "grad_scale", "ranks",
          "config", "precision", "world_size", "memory_allocated_bytes", "elapsed_s",
          "total_steps"]  # fmt: skip
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def metrics_lines(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.binary(max_size=30)).replace(b"\n", b" "))
        elif kind == 1:
            lines.append(json.dumps(draw(JSON_VALUES)).encode())
        else:
            rec = {"type": draw(st.sampled_from(RECORD_TYPES))}
            for key in draw(st.lists(st.sampled_from(FIELDS), max_size=6, unique=True)):
                rec[key] = draw(JSON_VALUES)
            lines.append(json.dumps(rec).encode())  # NaN and Infinity included, as Python writes
    return b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))


# Lines that once broke a reader: JSON nested deeper than the parser's recursion limit, an
# integer of 5,000 digits, numbers past a float and an int64 step, fields of other types.
HOSTILE = [
    b"[" * 100_000,
    b'{"type": "train", "step": 1, "loss": ' + b"9" * 5000 + b"}",
    b'{"type": "train", "step": 1, "loss": ' + b"9" * 400 + b"}",
    b'{"type": "train", "step": 1000000000000000000000000000000, "loss": 1.0}',
    b'{"type": "train", "step": "x", "loss": "y", "samples_per_s": []}',
    b'{"type": "header", "config": [null], "params": [], "total_steps": "x"}',
    b'{"type": "header", "config": {"train": [1]}, "params": {}}',
]


@FAST
@example(b"\n".join(HOSTILE) + b"\n")
@given(metrics_lines())
def test_any_metrics_file_is_followed_and_summarised(content: bytes) -> None:
    """The viewer's whole path from bytes to text: follow, store, snapshot, summary rows."""
    from tuitrain.ui.compare import Source, summarize, table_text
    from tuitrain.ui.ranks import rank_table
    from tuitrain.ui.view import display_state, failure, progress

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "metrics.jsonl"
        path.write_bytes(content)
        store = MetricStore()
        JsonlFollower(path, store).poll()
        snap = store.snapshot()
        progress(snap)
        display_state(snap, None)
        failure(snap)
        rank_table(snap.latest)
        summary = summarize(snap, path)
        table_text([(Source("A", path, store, "green"), summary)], 100)


@settings(SLOW, max_examples=60)
@example(b"\n".join(HOSTILE) + b'\n{"type": "eval", "step": 2, "val_acc": 0.5}\n', "tensorboard")
@example(b"\n".join(HOSTILE) + b'\n{"type": "eval", "step": 2, "val_acc": 0.5}\n', "csv")
@example(b"\n".join(HOSTILE) + b"\n", "csv")
@given(metrics_lines(), st.sampled_from(["csv", "tensorboard"]))
def test_export_of_any_metrics_file_exits_0_or_2(content: bytes, fmt: str) -> None:
    from tuitrain.commands.export import main as export_main

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "metrics.jsonl").write_bytes(content)
        err = io.StringIO()
        with redirect_stderr(err):
            code = export_main([folder, "--format", fmt, "--out", str(Path(folder) / "out")])
        assert code in (0, 2), err.getvalue()
        if code == 2:
            assert one_line(err.getvalue()), err.getvalue()
        event(f"export {fmt} exit {code}")


# --------------------------------------------------------------------------- checkpoints


@FAST
@given(st.binary(max_size=300))
def test_a_checkpoint_of_any_bytes_loads_or_is_refused(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ckpt-step00000001.pt"
        path.write_bytes(content)
        try:
            state = load_checkpoint(path)
        except CheckpointError as exc:
            assert one_line(str(exc))
            return
        assert isinstance(state, dict) and "model" in state


@pytest.fixture(scope="module")
def saved_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from tuitrain.cli import main

    run_dir = tmp_path_factory.mktemp("prop") / "run"
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = main(["--no-ui", "--max-steps", "1", "--run-dir", str(run_dir), *TINY])
    assert code == 0, out.getvalue()
    path = find_latest(run_dir)
    return path, load_checkpoint(path)


TOP_KEYS = ["step", "epoch", "epoch_step", "samples", "model", "optimizer", "scheduler", "scaler",
            "rng", "meter", "config", "preset", "world_size"]  # fmt: skip


@pytest.mark.slow
@settings(SLOW, max_examples=60)
@given(st.sampled_from(TOP_KEYS), JSON_VALUES, st.booleans())
def test_a_checkpoint_with_any_part_replaced_is_resumed_or_refused(
    saved_state: tuple[Path, dict[str, Any]], key: str, value: Any, drop: bool
) -> None:
    path, state = saved_state
    altered = {**state, SOURCE_KEY: str(path)}
    if drop:
        altered.pop(key, None)
    else:
        altered[key] = value
    cfg = load_preset("fashion-mini", TINY_OVERRIDES)
    try:
        check_resumable(cfg, altered)
    except CheckpointError as exc:
        assert one_line(str(exc))
        event("refused")
    else:
        event("resumable")


# --------------------------------------------------------------------------- the command line

TINY_OVERRIDES = ["data.train_samples=256", "data.val_samples=128"]
TINY = [arg for o in TINY_OVERRIDES for arg in ("--set", o)]
# keys whose values cannot make one step take long or much memory (sizes stay tiny)
CLI_KEYS = [k for k in OVERRIDE_KEYS if k.split(".")[0] in ("optim", "train", "checkpoint", "run")
            and k not in ("train.compile", "train.epochs", "train.pace_s", "train.device",
                          "run.run_dir")] + ["data.batch_size", "data.num_workers", "data.loader",
                                             "model.dropout", "model.channels_last"]  # fmt: skip


def plausible(key: str) -> st.SearchStrategy[Any]:
    """A value of the key's own type, mostly small: so that many generated runs do train."""
    section, name = key.split(".")
    tp = typing.get_type_hints(SECTIONS[section])[name]
    if typing.get_origin(tp) is typing.Literal:
        return st.sampled_from(typing.get_args(tp))
    return {
        bool: st.booleans(),
        int: st.integers(0, 40),
        float: st.floats(0, 1),
        str: st.sampled_from(["", "x"]),
    }[tp]


@st.composite
def cli_pairs(draw: st.DrawFn) -> list[tuple[str, Any]]:
    keys = draw(st.lists(st.sampled_from(CLI_KEYS), max_size=3, unique=True))
    return [(k, draw(st.one_of(plausible(k), plausible(k), SCALARS))) for k in keys]


def override_literal(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json.dumps(value)


@pytest.mark.slow
@settings(SLOW, max_examples=60)
@given(cli_pairs(), st.booleans())
def test_the_command_line_exits_0_or_2_with_one_line(
    tmp_path: Path, pairs: list[tuple[str, Any]], as_preset: bool
) -> None:
    """One training step with generated overrides (or a generated preset file): exit 0, or
    exit 2 and one line on stderr."""
    from tuitrain.cli import main

    overrides = [f"{key}={override_literal(value)}" for key, value in pairs]
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        args = ["--no-ui", "--max-steps", "1", "--run-dir", str(Path(folder) / "run"), *TINY]
        if as_preset:
            preset = Path(folder) / "generated.toml"
            tables: dict[str, dict[str, str]] = {"data": {"name": '"fashion_mini"'}}
            for key, value in pairs:
                section, name = key.split(".")
                tables.setdefault(section, {})[name] = override_literal(value)
            lines = ["[preset]", 'description = "generated"']
            for section, values in tables.items():
                lines += [f"[{section}]", *(f"{k} = {v}" for k, v in values.items())]
            preset.write_text("\n".join(lines) + "\n")
            args += ["--preset", str(preset)]
        else:
            args += [arg for o in overrides for arg in ("--set", o)]
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
        assert code in (0, 2), err.getvalue()
        if code == 2:
            assert one_line(err.getvalue()), err.getvalue()
        event(f"exit {code}")


@FAST
@example(b"[" * 100_000 + b"\n")
@example(b'{"type": "train", "loss": ' + b"9" * 5000 + b"}\n")
@given(st.binary(max_size=200))
def test_watch_probes_any_first_line(line: bytes) -> None:
    """`tuitrain watch FILE` reads the first line to tell a metrics file from something else;
    a line nested past the JSON parser's recursion limit used to raise (exit 1)."""
    from tuitrain.rundir.read import first_line_state

    assert first_line_state(line) in ("empty", "writing", "record", "other")
