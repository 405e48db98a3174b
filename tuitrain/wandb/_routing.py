"""`tuitrain.wandb.install()` and `tuitrain.trackio.install()`: a face (and its submodules) put
into `sys.modules` under the library's name, so `import wandb` (`from wandb.sdk.lib import
RunDisabled` ...) anywhere after it gets tuitrain, and the library's version asked through
`importlib.metadata` (Lightning's `RequirementCache("wandb>=0.12.10")`) answers the face's.
Idempotent; refused, in one sentence, where the real library is imported already."""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from tuitrain.core.errors import UserError


def route(
    alias: str,
    face: str,
    version: str,
    submodules: tuple[str, ...] = (),
    extra: Mapping[str, str] | None = None,
) -> None:
    """`sys.modules[alias] = face`, each `face.sub` as `alias.sub`, `extra` ({alias's
    submodule: face's module}) besides; then the frameworks already imported are told."""
    held = sys.modules.get(alias)
    if held is not None and getattr(held, "__name__", None) != face:
        where = getattr(held, "__file__", None) or "an earlier import"
        raise UserError(
            f"tuitrain.{alias}.install(): the real {alias} is imported already ({where}), so"
            f" `import {alias}` can no longer be routed to tuitrain; call install() first,"
            f" before anything imports {alias} (transformers, lightning, your own modules)."
        )
    module = importlib.import_module(face)
    for sub in submodules:
        importlib.import_module(f"{face}.{sub}")
    sys.modules[alias] = module
    for name, loaded in list(sys.modules.items()):
        if name.startswith(face + "."):
            sys.modules[alias + name[len(face) :]] = loaded
    for name, target in (extra or {}).items():
        sys.modules[f"{alias}.{name}"] = sys.modules[target]
    if not any(isinstance(f, _Distributions) and f.name == alias for f in sys.meta_path):
        sys.meta_path.insert(0, _Distributions(alias, version))
    _refresh(alias)


def _refresh(alias: str) -> None:
    """A framework imported before install() found no `alias` and kept that answer: Lightning
    in a RequirementCache (`_WANDB_AVAILABLE`), accelerate in its list of trackers. Asked
    again (what install() before the framework's import needs no help for)."""
    for module_name in (f"lightning.pytorch.loggers.{alias}", f"pytorch_lightning.loggers.{alias}"):
        cache = getattr(sys.modules.get(module_name), f"_{alias.upper()}_AVAILABLE", None)
        if cache is not None and getattr(cache, "available", None) is False:
            vars(cache).pop("available", None)  # a RequirementCache that said "not installed"
    tracking = sys.modules.get("accelerate.tracking")
    found = getattr(tracking, "_available_trackers", None)
    kind = getattr(tracking, "LoggerType", None)
    if isinstance(found, list) and kind is not None:
        try:
            tracker = kind(alias)
        except ValueError:  # an accelerate without that tracker
            return
        if tracker not in found:
            found.append(tracker)


def _normal(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


class _Distributions(importlib.abc.MetaPathFinder):
    """Answers `importlib.metadata` for the routed name (and nothing else): its version."""

    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version

    def find_spec(self, *_: Any, **__: Any) -> None:
        return None  # imports are answered by sys.modules

    def find_distributions(self, context: Any = None) -> Iterator[Any]:
        wanted = getattr(context, "name", None)
        if wanted is not None and _normal(str(wanted)) == _normal(self.name):
            yield _distribution(self.name, self.version)


def _distribution(name: str, version: str) -> Any:
    from importlib.metadata import Distribution

    class Routed(Distribution):
        def read_text(self, filename: str) -> str | None:
            if filename == "METADATA":
                return (
                    f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                    f"Summary: tuitrain's {name} face (tuitrain.{name}.install())\n"
                )
            return None

        def locate_file(self, path: Any) -> Any:
            from pathlib import Path

            return Path(path)

    return Routed()


def run_routed(alias: str, install: Any, argv: list[str]) -> int:
    """`python -m tuitrain.<alias> SCRIPT [ARGS...]`: `install()`, then SCRIPT as `__main__`
    with ARGS as its argv (its exit code is the process's)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(
            f"usage: python -m tuitrain.{alias} SCRIPT [ARGS...]: runs SCRIPT with"
            f" `import {alias}` routed to tuitrain",
            file=sys.stderr,
        )
        return 0 if argv else 2
    import os
    import runpy

    if not os.path.isfile(argv[0]):
        print(f"tuitrain.{alias}: no script at {argv[0]!r}", file=sys.stderr)
        return 2
    install()
    children = routed_children(alias)
    if children is not None:  # the script's own children import `alias` routed too
        parts = [children, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
        sys.path.insert(0, children)  # a spawn child takes its parent's sys.path, not PYTHONPATH
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as `python SCRIPT` does
    runpy.run_path(argv[0], run_name="__main__")
    return 0


def routed_children(alias: str) -> str | None:
    """The folder whose `alias` package routes `import alias` to tuitrain in a process that
    inherits it on PYTHONPATH (tuitrain/wandb/children/), None for a name without one."""
    import os

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children")
    return folder if os.path.isfile(os.path.join(folder, alias, "__init__.py")) else None
