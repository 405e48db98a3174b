"""The run directory: metrics.jsonl, the resolved config (config.toml) and train.log."""

from __future__ import annotations

import itertools
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from tuitrain.config import Config
from tuitrain.errors import UserError


def default_run_dir(cfg: Config) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.name}-{stamp}"


def prepare_run_dir(cfg: Config, run_dir: str | Path | None = None) -> Path:
    """Create the run dir and prove it is writable before any training starts."""
    path = Path(run_dir or cfg.run.run_dir or default_run_dir(cfg)).expanduser()
    probe = path / ".write-test"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"run dir {path} is not writable ({reason}); pass --run-dir with a writable folder."
        ) from exc
    return path


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def config_to_toml(cfg: Config) -> str:
    """The resolved config as a preset file: `tuitrain --preset RUN/config.toml` reruns it."""
    lines = [f"# resolved config of preset {cfg.name}"]
    for section, values in cfg.to_dict().items():
        lines.append(f"\n[{section}]")
        lines += [f"{key} = {_toml_value(val)}" for key, val in values.items()]
    return "\n".join(lines) + "\n"


def write_resolved_config(run_dir: Path, cfg: Config) -> Path:
    path = run_dir / "config.toml"
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(config_to_toml(cfg), encoding="utf-8")
    os.replace(tmp, path)
    return path


def sibling_run_dir(previous: Path | None, preset: str) -> Path | None:
    """A fresh run dir next to `previous` (runs/<preset>-<stamp>), never an existing one."""
    if previous is None:
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = previous.parent / f"{preset}-{stamp}"
    path = base
    for n in itertools.count(2):
        if not path.exists():
            return path
        path = base.with_name(f"{base.name}-{n}")
    return path  # unreachable; keeps type checkers calm
