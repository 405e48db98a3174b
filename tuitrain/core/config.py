"""Typed preset schema: one dataclass per TOML table, checked on load.

A preset is a TOML file with the tables below. Loading goes TOML -> raw dict -> `--set`
overrides -> typed dataclasses, and every step reports errors users can cause as a
`ConfigError` naming the key path and, where it can, the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tuitrain.core.errors import UserError
from tuitrain.core.safefile import NotRegular, open_regular, regular_or_missing
from tuitrain.core.text import cut_at_word

DEFAULT_PRESET = "fashion-mini"
DESCRIPTION_CHARS = 200  # a preset's description as listed: longer ones end "…" at a word
PRESET_MAX_BYTES = 1 << 20  # a preset file is a few hundred bytes; this is surely not one


class ConfigError(UserError):
    """A preset or override that cannot be used as given."""


def _f(default: Any, doc: str, **rules: Any) -> Any:
    """A field with its documentation and range rules (min, max, gt) in metadata."""
    return field(default=default, metadata={"doc": doc, **rules})


@dataclass(kw_only=True, slots=True)
class PresetInfo:
    description: str = _f(
        "", "One line shown by --list-presets and the preset picker.", max_len=1000
    )
    gpu: bool = _f(False, "Meant for a GPU: a run of it on a CPU starts with a warning.")


@dataclass(kw_only=True, slots=True)
class TaskConfig:
    name: str = _f(
        "classify",
        "classify (cross-entropy over class indices; val loss and accuracy) | charlm (next"
        " character; val loss in nats and bits per character), or a user factory "
        "'package.module:function' returning an object with training_step(model, batch)"
        " (docs/tasks.md).",
    )
    tolerance: float = _f(
        0.0,
        "Parity: the largest gap of the primary metric between fp32 and mixed precision that"
        " passes, in the metric's units (0 = the task's own; classify: 0.5 points).",
        min=0.0,
        max=1e6,
    )


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    name: str = _f(
        "fashion_cnn",
        "fashion_cnn | resnet18 | resnet18_cifar (3x3 stem, no max-pool: small images) | mlp | "
        "gpt (a causal character transformer for the charlm task: layers, heads, width), "
        "or a user factory 'package.module:function' "
        "called as factory(num_classes=N) -> nn.Module.",
    )
    dropout: float = _f(0.5, "Dropout before the classifier (fashion_cnn, mlp).", min=0.0, max=0.99)
    channels_last: bool = _f(False, "Use the channels_last memory format (helps convs on GPU).")
    layers: int = _f(6, "Transformer blocks (gpt).", min=1, max=1024)
    heads: int = _f(
        6, "Attention heads per block (gpt); width must be a multiple.", min=1, max=1024
    )
    width: int = _f(384, "Embedding width (gpt).", min=8, max=65536)


@dataclass(kw_only=True, slots=True)
class DataConfig:
    name: str = _f(
        "fashion_mnist",
        "fashion_mnist | fashion_mini (shipped subset) | synthetic | shakespeare (shipped text, "
        "for the charlm task), or a user factory "
        "'package.module:function' called as factory(split='train'|'val') -> Dataset.",
    )
    loader: Literal["device", "dataloader"] = _f(
        "device",
        "device: the whole set as uint8 on the device, batches by indexing; "
        "dataloader: torch DataLoader (used for user datasets).",
    )
    batch_size: int = _f(256, "Samples per optimizer micro-step on each rank.", min=1, max=1 << 20)
    eval_batch_size: int = _f(1024, "Samples per evaluation batch.", min=1, max=1 << 20)
    num_classes: int = _f(
        10, "Number of classes; labels must lie in [0, num_classes).", min=2, max=1 << 20
    )
    num_workers: int = _f(2, "DataLoader worker processes (dataloader path).", min=0, max=256)
    pin_memory: bool = _f(True, "Pin host memory so non_blocking copies overlap (CUDA only).")
    persistent_workers: bool = _f(True, "Keep DataLoader workers alive between epochs.")
    prefetch_factor: int = _f(2, "Batches each worker prepares ahead.", min=1, max=64)
    data_dir: str = _f("", "Where Fashion-MNIST's IDX files are; empty = the lookup order.")
    image_size: int = _f(
        224, "Synthetic images are channels x image_size x image_size.", min=8, max=4096
    )
    channels: int = _f(3, "Channels of synthetic images.", min=1, max=64)
    crop_padding: int = _f(
        0,
        "Train-time random crop: pad each image by this many black pixels per side and crop"
        " back to its size at a random offset, on the device (0 = off).",
        min=0,
        max=64,
    )
    hflip: bool = _f(False, "Train-time augmentation: flip each image left-right with p = 1/2.")
    context: int = _f(
        256, "Characters per sequence (shakespeare): the model's context.", min=2, max=1 << 16
    )
    train_samples: int = _f(0, "Use only the first N training samples (0 = all).", min=0)
    val_samples: int = _f(0, "Use only the first N validation samples (0 = all).", min=0)


@dataclass(kw_only=True, slots=True)
class OptimConfig:
    name: Literal["adamw", "sgd"] = _f("adamw", "Optimizer.")
    lr: float = _f(2e-3, "Peak learning rate.", gt=0.0, max=10.0)
    weight_decay: float = _f(1e-4, "Decoupled weight decay (AdamW) or L2 (SGD).", min=0.0, max=1.0)
    momentum: float = _f(0.9, "SGD momentum.", min=0.0, max=1.0)
    schedule: Literal["cosine", "linear", "constant"] = _f(
        "cosine", "Learning-rate schedule after warmup (cosine or linear decay, or constant)."
    )
    warmup_steps: int = _f(0, "Linear warmup steps.", min=0)
    min_lr_ratio: float = _f(0.0, "Decay floor as a fraction of lr.", min=0.0, max=1.0)
    grad_clip: float = _f(
        0.0, "Clip the global grad norm to this value (0 = off).", min=0.0, max=1e6
    )
    grad_accum: int = _f(1, "Micro-batches accumulated per optimizer step.", min=1, max=4096)


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    epochs: int = _f(1, "Epochs to train.", min=1, max=100_000)
    max_steps: int = _f(0, "Stop after this many optimizer steps in total (0 = no limit).", min=0)
    device: Literal["auto", "cpu", "cuda", "mps"] = _f("auto", "auto = cuda, then mps, then cpu.")
    precision: Literal["auto", "fp32", "fp16", "bf16"] = _f(
        "auto", "auto = bf16 where supported, else fp16 on CUDA, else fp32."
    )
    compile: Literal["auto", "on", "off"] = _f("auto", "torch.compile: auto = on for CUDA only.")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = _f(
        "default", "torch.compile mode."
    )
    label_smoothing: float = _f(
        0.0,
        "Label smoothing of the training loss (the val loss stays plain cross-entropy).",
        min=0.0,
        max=0.99,
    )
    tf32: bool = _f(True, "Allow TF32 matmuls and convolutions on Ampere and newer.")
    host_malloc: Literal["retain", "system"] = _f(
        "retain",
        "Host allocator: retain = glibc keeps freed memory (tensors up to 32 MiB from its heap, "
        "1 GiB trim threshold; no page faults a step, resident memory stays at its peak); "
        "system = the C library's defaults. Process-wide; glibc only.",
    )
    seed: int = _f(0, "Seed for weights, dropout and batch order.", min=0, max=2**32 - 1)
    log_every: int = _f(20, "Optimizer steps between log points (the only host syncs).", min=1)
    profile_steps: int = _f(0, "Profile this many steps with torch.profiler (0 = off).", min=0)
    memory_snapshot_steps: int = _f(
        0,
        "Record the CUDA allocator's history for this many steps and write "
        "memory-snapshot-stepN.pickle for https://pytorch.org/memory_viz (0 = off; CUDA only).",
        min=0,
        max=10_000,
    )
    eval_every_epoch: bool = _f(True, "Evaluate at the end of each epoch.")
    eval_every: int = _f(
        0,
        "Also evaluate every N optimizer steps (0 = at epoch ends only; language models).",
        min=0,
    )
    measure_peak: bool = _f(
        False, "Measure the peak TFLOP/s for MFU with a short matmul probe (else: the table)."
    )
    pace_s: float = _f(
        0.0, "Sleep this long after each step (demos and UI tests).", min=0.0, max=60.0
    )


@dataclass(kw_only=True, slots=True)
class RunConfig:
    run_dir: str = _f("", "Run directory; empty = runs/<preset>-<timestamp>.")
    tensorboard: bool = _f(
        False, "Also write TensorBoard event files to RUN_DIR/tensorboard (needs tensorboard)."
    )


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    every_steps: int = _f(0, "Save every N optimizer steps (0 = off).", min=0)
    at_epoch_end: bool = _f(True, "Save at the end of each epoch (after evaluation).")
    on_stop: bool = _f(True, "Save when stopped (SIGTERM, SIGINT, quit from the UI).")
    keep: int = _f(
        3, "Keep the newest K checkpoints; older ones go once a new one is whole.", min=1
    )
    format: Literal["auto", "whole", "sharded"] = _f(
        "auto",
        "whole (one ckpt-step<N>.pt, gathered to rank 0) | sharded (a ckpt-step<N>.dcp"
        " folder: torch.distributed.checkpoint, every rank writes its own shard) | auto"
        " (sharded under FSDP with more than one rank, else whole). Both resume on any"
        " world size and strategy.",
    )


@dataclass(kw_only=True, slots=True)
class DistributedConfig:
    strategy: Literal["ddp", "fsdp"] = _f(
        "ddp",
        "With more than one rank: ddp (every rank holds the whole model; gradients"
        " all-reduced) | fsdp (FSDP2: weights, gradients and optimizer state sharded per"
        " block; checkpoints sharded, see checkpoint.format). One process ignores it.",
    )
    timeout_s: float = _f(
        300.0,
        "Process-group timeout: a dead rank ends the job after it (1 s to 7 days).",
        min=1.0,
        max=7 * 24 * 3600.0,
    )


AlertAction = Literal["off", "warn", "pause", "checkpoint", "stop"]


@dataclass(kw_only=True, slots=True)
class AlertsConfig:
    loss_spike: AlertAction = _f("warn", "The loss far above its recent median.")
    loss_spike_factor: float = _f(
        3.0, "A spike: the logged loss above this x the median of the last 20.", gt=1.0, max=1e6
    )
    scale_collapse: AlertAction = _f("warn", "The fp16 GradScaler scale below 1.")
    stall: AlertAction = _f("warn", "No optimizer step for stall_s seconds while running.")
    stall_s: float = _f(300.0, "Seconds without a step that make a stall.", gt=0.0, max=1e6)
    throughput_drop: AlertAction = _f("warn", "Samples/s well below the run's median.")
    throughput_drop_ratio: float = _f(
        0.5, "A drop: samples/s below this x the run's median.", gt=0.0, max=1.0
    )
    memory_creep: AlertAction = _f("warn", "The allocator's peak rising interval after interval.")
    memory_creep_intervals: int = _f(
        10, "Log points of a rising peak that make a creep.", min=2, max=10_000
    )
    input_bound: AlertAction = _f("warn", "The loop waiting for data for several log points.")
    input_bound_share: float = _f(0.2, "Data wait share of step time.", gt=0.0, max=1.0)
    input_bound_intervals: int = _f(3, "Log points in a row above the share.", min=1, max=10_000)
    straggler: AlertAction = _f("warn", "Under DDP, a rank 1.2x slower than the median.")
    stalled_rank: Literal["off", "warn", "stop"] = _f(
        "warn",
        "With more than one rank, a rank that stopped reaching the step while others wait for"
        " it in a collective, or whose heartbeat stopped: named, with every rank's Python"
        " stacks in RUN_DIR/stacks/; stop ends every rank (exit 1) instead of waiting for"
        " distributed.timeout_s.",
    )
    stalled_rank_s: float = _f(
        30.0,
        "The stalled-rank bound in seconds: at least this, and at least stalled_rank_factor x"
        " the median step time; keep it below distributed.timeout_s.",
        min=1.0,
        max=1e6,
    )
    stalled_rank_factor: float = _f(
        10.0, "The stalled-rank bound as a multiple of the median step time.", gt=0.0, max=1e6
    )
    divergence: AlertAction = _f(
        "warn",
        "The loss far above where training started (or above the task's chance level), or the"
        " primary metric at chance after an epoch: a run that diverged from the start.",
    )
    divergence_factor: float = _f(
        10.0,
        "Divergence: the logged loss above this x the reference (the chance-level loss when the"
        " task declares one, else the first logged loss).",
        gt=1.0,
        max=1e6,
    )
    nonfinite_metric: AlertAction = _f(
        "warn", "A task's own metric (train or validation) NaN or infinite."
    )
    on_alert: str = _f(
        "", "Shell command run once per alert, the alert as one JSON object on its stdin."
    )
    on_alert_timeout_s: float = _f(10.0, "The on_alert command's time limit.", gt=0.0, max=3600)


@dataclass(kw_only=True, slots=True)
class Config:
    preset: PresetInfo = field(default_factory=PresetInfo)
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    run: RunConfig = field(default_factory=RunConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    name: str = "custom"  # the preset's name (file stem); not a TOML key

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("name")
        return out


SECTIONS: dict[str, type] = {
    f.name: typing.get_type_hints(Config)[f.name]
    for f in dataclasses.fields(Config)
    if f.name != "name"
}


# --------------------------------------------------------------------------- validation


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(path: str, value: Any, tp: Any) -> Any:
    """Check one value against its annotated type; ints are accepted for floats."""
    if typing.get_origin(tp) is Literal:
        choices = typing.get_args(tp)
        if isinstance(value, bool) and "on" in choices:
            value = "on" if value else "off"
        if value not in choices:
            raise ConfigError(
                f"{path} = {value!r} is not valid; choose one of {', '.join(map(repr, choices))}."
            )
        return value
    if isinstance(tp, types.UnionType):  # not used today; keep errors explicit if added
        raise TypeError(f"unsupported annotation for {path}")
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        raise ConfigError(
            f"{path} must be {_type_name(tp)}, not {type(value).__name__} ({value!r})."
        )
    if tp is float:
        try:
            finite = math.isfinite(value)  # nan passes every range check
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            raise ConfigError(f"{path} = {value!r:.40} is not a finite number; give a real number.")
    if tp is str and (bad := next((c for c in value if ord(c) < 32 or ord(c) == 127), None)):
        raise ConfigError(f"{path} = {value!r:.60} holds a control character ({bad!r}); remove it.")
    if tp is str and (bad := next((c for c in value if 0x80 <= ord(c) < 0xA0), None)):
        raise ConfigError(f"{path} = {value!r:.60} holds a control character ({bad!r}); remove it.")
    return float(value) if tp is float else value


SYNTHETIC_MAX = 1 << 24  # synthetic train/val samples: 128 MiB of labels
INT_MAX = 2**31 - 1  # the bound of an int without its own: past it torch and numpy overflow


TEXT_MAX = 4096  # the longest text a key takes (PATH_MAX): a header stays readable by watch


def _check_range(path: str, value: Any, meta: typing.Mapping[str, Any]) -> None:
    if isinstance(value, str):
        limit = meta.get("max_len", TEXT_MAX)
        if len(value) > limit:
            raise ConfigError(
                f"{path} is {len(value):,} characters long; it must be at most {limit:,}."
            )
        return
    if isinstance(value, int) and not isinstance(value, bool) and "max" not in meta:
        meta = {**meta, "max": INT_MAX}
    if "min" in meta and value < meta["min"]:
        raise ConfigError(f"{path} = {value!r} is out of range; it must be >= {meta['min']}.")
    if "gt" in meta and value <= meta["gt"]:
        raise ConfigError(f"{path} = {value!r} is out of range; it must be > {meta['gt']}.")
    if "max" in meta and value > meta["max"]:
        raise ConfigError(f"{path} = {value!r} is out of range; it must be <= {meta['max']}.")


def _unknown(path: str, key: str, valid: list[str]) -> ConfigError:
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"; did you mean '{path}{near[0]}'?" if near else f"; valid keys: {', '.join(valid)}."
    return ConfigError(f"unknown key '{path}{key}'{hint}")


def _build_section(name: str, cls: type, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"'{name}' must be a table ([{name}]), not {type(raw).__name__}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            raise _unknown(f"{name}.", key, list(fields))
        path = f"{name}.{key}"
        value = _coerce(path, value, hints[key])
        _check_range(path, value, fields[key].metadata)
        values[key] = value
    return cls(**values)


def config_from_dict(raw: dict[str, Any], name: str = "custom") -> Config:
    """Typed config from a raw (TOML-shaped) dict; raises ConfigError on any bad key or value."""
    sections: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in SECTIONS:
            raise _unknown("", key, list(SECTIONS))
        sections[key] = _build_section(key, SECTIONS[key], value)
    cfg = Config(**sections, name=name)
    _check_cross_fields(cfg)
    return cfg


def _check_cross_fields(cfg: Config) -> None:
    if cfg.data.name == "synthetic" and cfg.data.loader != "device":
        raise ConfigError("data.loader must be 'device' for data.name = 'synthetic'.")
    for key in ("train_samples", "val_samples"):  # made in memory: 8 bytes of label each
        if cfg.data.name == "synthetic" and getattr(cfg.data, key) > SYNTHETIC_MAX:
            raise ConfigError(
                f"data.{key} = {getattr(cfg.data, key)} is too many synthetic samples; "
                f"it must be <= {SYNTHETIC_MAX} (the labels alone are made in memory)."
            )


# --------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], value); the value is read as TOML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r} must look like section.key=value (e.g. optim.lr=3e-3).")
    dotted, _, literal = text.partition("=")
    keys = [k.strip() for k in dotted.strip().split(".")]
    if len(keys) != 2 or not all(keys):
        raise ConfigError(f"--set {text!r}: the key must be section.key (e.g. train.epochs).")
    literal = literal.strip()
    try:
        value = tomllib.loads(f"v = {literal}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if literal[:1] in ("'", '"', "[", "{"):  # meant as TOML: a quote left open, say
            raise ConfigError(
                f"--set {text!r}: the value is not valid TOML ({exc}); quote a text as 'text'."
            ) from None
        value = literal  # a bare word such as bf16 or cuda
    except ValueError:  # an integer of more than 4300 digits
        raise ConfigError(
            f"--set {dotted.strip()}=…: the number has too many digits; give a value in range."
        ) from None
    return keys, value


def overrides_from(pairs: list[tuple[str, Any]]) -> list[str]:
    """Dedicated CLI flags as `section.key=value` overrides; None means "not given"."""
    out = []
    for key, value in pairs:
        if value is None:
            continue
        # a text as a TOML string (JSON's escapes are TOML's): newlines and quotes survive
        literal = json.dumps(value) if isinstance(value, str) else str(value)
        out.append(f"{key}={literal}")
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for text in overrides:
        (section, key), value = parse_override(text)
        out.setdefault(section, {})
        if isinstance(out[section], dict):
            out[section][key] = value
    return out


# --------------------------------------------------------------------------- preset files


def shipped_presets_dir() -> Path:
    """Presets inside the wheel (tuitrain/presets) or, from a source tree, the repo's presets/."""
    here = Path(__file__).resolve().parents[1]  # tuitrain/
    inside = here / "presets"
    return inside if inside.is_dir() else here.parent / "presets"


def user_presets_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tuitrain" / "presets"


def available_presets() -> dict[str, Path]:
    """Preset name -> file; user presets shadow shipped ones of the same name."""
    found: dict[str, Path] = {}
    for folder in (shipped_presets_dir(), user_presets_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                found[path.stem] = path
    return found


def resolve_preset(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        try:
            exists = regular_or_missing(path, "pass a preset's .toml file")
        except NotRegular as exc:
            raise ConfigError(f"preset {exc}") from None
        if not exists:
            raise ConfigError(f"preset file {name_or_path} does not exist; check the path.")
        return path
    presets = available_presets()
    if name_or_path in presets:
        return presets[name_or_path]
    near = difflib.get_close_matches(name_or_path, list(presets), n=1)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    raise ConfigError(
        f"unknown preset '{name_or_path}'; available: {', '.join(presets)}.{hint}"
        " (A path to a .toml file also works.)"
    )


def read_toml(path: Path) -> dict[str, Any]:
    try:  # never blocks: a FIFO named x.toml is refused, not opened for reading
        with open_regular(path, "rb", "pass a preset's .toml file") as f:
            data = f.read(PRESET_MAX_BYTES + 1)
    except NotRegular as exc:
        raise ConfigError(f"preset {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read preset {path}: {exc.strerror}.") from exc
    if len(data) > PRESET_MAX_BYTES:
        raise ConfigError(
            f"preset {path} is over {PRESET_MAX_BYTES // 1024} KiB; a preset is a short TOML file."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"preset {path} is not UTF-8 text; pass a TOML preset file.") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}.") from exc
    except ValueError:  # an integer of more than 4300 digits
        raise ConfigError(
            f"{path} holds a number with too many digits; give a value in range."
        ) from None


def load_preset(name_or_path: str = DEFAULT_PRESET, overrides: list[str] | None = None) -> Config:
    """Find a preset by name or path, apply `section.key=value` overrides, validate."""
    path = resolve_preset(name_or_path)
    preset = read_toml(path)
    raw = apply_overrides(preset, overrides or [])
    try:
        return config_from_dict(raw, name=path.stem)
    except ConfigError as exc:
        if overrides:  # whose mistake: the file's, or the override's?
            try:
                config_from_dict(preset, name=path.stem)
            except ConfigError:
                pass
            else:
                raise ConfigError(f"--set: {exc}") from None
        raise ConfigError(f"{path.name}: {exc}") from None


def describe_presets() -> list[tuple[str, str]]:
    """(name, one-line description) of every preset found, for --list-presets and the picker."""
    out = []
    for name, path in available_presets().items():
        try:
            table = read_toml(path).get("preset", {})
            if not isinstance(table, dict):
                raise ConfigError(
                    f"its 'preset' must be a table ([preset]), not {type(table).__name__}"
                )
            desc = table.get("description", "")
            if not isinstance(desc, str):
                raise ConfigError(f"its preset.description must be text, not {type(desc).__name__}")
        except ConfigError as exc:
            desc = f"(unreadable: {exc})"
        out.append((name, cut_at_word(desc, DESCRIPTION_CHARS)))
    return out
