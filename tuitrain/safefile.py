"""Files a run creates in its run dir, opened without following symbolic links.

A run dir may lie in a shared place (/tmp, a shared filesystem). A link planted there under a
name tuitrain writes (`metrics.jsonl`, `train.log`, a temp file) would have the run truncate or
append to the link's target, any file its user can write. Every file in a run dir is opened
with O_NOFOLLOW (a link as the last component is refused: ELOOP), and temp files are created
with O_EXCL under a name of their own (nothing already there, link or file, is reused).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tuitrain.errors import UserError

_FLAGS = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class LinkRefused(UserError):
    """A file tuitrain was about to write is a symbolic link (exit 2)."""


def open_nofollow(path: Path, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for mode w/a/a+/x (add b for bytes), refusing a symbolic link."""
    flags = _FLAGS[mode.replace("b", "")]
    try:
        fd = os.open(path, flags | NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise LinkRefused(
                f"{path} is a symbolic link; tuitrain does not write through links (one planted "
                "in a shared folder could point at any of your files): remove it, or pass "
                "another --run-dir."
            ) from None
        raise
    return os.fdopen(fd, mode.replace("x", "w"), **kwargs)


def temp_beside(path: Path) -> Path:
    """A fresh name for a temp file next to `path` (created with mode 'x', so never reused)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A new, empty temp file beside `path` (O_EXCL: nothing planted is reused) for the caller
    to fill, by name or with `open_nofollow(tmp, "w")`; renamed over `path` when the block
    ends (a link at `path` is replaced, never written through), removed when it raises."""
    tmp = temp_beside(path)
    try:
        with open_nofollow(tmp, "x"):
            pass  # the name is ours now
        yield tmp
        if os.path.islink(tmp):  # a writer that goes by name must not have been redirected
            raise LinkRefused(f"{tmp} became a symbolic link while it was written")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_atomic_text(path: Path, text: str) -> Path:
    """Write `text` to a new temp file beside `path`, then rename it over `path`."""
    with replacing(path) as tmp, open_nofollow(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path
