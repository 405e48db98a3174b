"""Feed a MetricStore from a metrics.jsonl file: replay it, then follow it as it grows.

For `tuitrain watch`. Robust to what real files do: a truncated last line (a run killed
mid-write) waits for its newline or is skipped, unknown record types are ignored by the
store, and a file that is replaced or truncated (a new run in the same dir) starts over.

Opening a long file stays fast and bounded: the store keeps a few thousand points per
series anyway, so the catch-up parses every non-train record but only an evenly strided
subset of the train records plus the most recent ones.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from tuitrain.metrics.store import MetricStore

TRAIN_PREFIX = b'{"type": "train"'
CATCHUP_TRAIN_POINTS = 4096  # train records parsed from history (the store keeps ~2.5k)
CATCHUP_TAIL = 512  # and every one of the newest records


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None  # a torn or garbled line: skip it
    return rec if isinstance(rec, dict) else None


class JsonlFollower:
    """Reads `path` into `store`: `poll()` takes what is new; `start()` polls in a thread."""

    def __init__(self, path: Path, store: MetricStore, poll_s: float = 0.25) -> None:
        self.path = Path(path)
        self.store = store
        self.poll_s = poll_s
        self._offset = 0
        self._partial = b""
        self._inode: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.records_read = 0
        self.restarts = 0

    # ---------------------------------------------------------------- reading
    def poll(self) -> int:
        """Read the lines appended since the last call; returns how many records were pushed."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return 0  # not there yet, or being replaced: try again later
        if self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self._offset):
            self._start_over()
        self._inode = stat.st_ino
        if stat.st_size == self._offset:
            return 0
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        first_read = self.records_read == 0 and self._partial == b""
        data, self._partial = self._partial + data, b""
        lines = data.split(b"\n")
        self._partial = lines.pop()  # no newline yet: maybe still being written
        if first_read and len(lines) > CATCHUP_TRAIN_POINTS + CATCHUP_TAIL:
            lines = self._catchup_selection(lines)
        pushed = 0
        for line in lines:
            rec = _parse(line) if line.strip() else None
            if rec is not None:
                self.store.push(rec)
                pushed += 1
        self.records_read += pushed
        return pushed

    def _catchup_selection(self, lines: list[bytes]) -> list[bytes]:
        """Every non-train line, a strided subset of the older train lines, all recent ones."""
        head, tail = lines[:-CATCHUP_TAIL], lines[-CATCHUP_TAIL:]
        n_train = sum(1 for line in head if line.startswith(TRAIN_PREFIX))
        stride = max(1, n_train // CATCHUP_TRAIN_POINTS)
        kept: list[bytes] = []
        seen = 0
        for line in head:
            if line.startswith(TRAIN_PREFIX):
                seen += 1
                if seen % stride:
                    continue
            kept.append(line)
        return kept + tail

    def _start_over(self) -> None:
        self._offset = 0
        self._partial = b""
        self.records_read = 0
        self.restarts += 1
        self.store.reset()

    # ---------------------------------------------------------------- thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tuitrain-follow", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def resolve_metrics_path(target: str | Path) -> Path:
    """A run dir or a metrics.jsonl path -> the metrics file (rank 0's for a DDP run)."""
    path = Path(target).expanduser()
    return path / "metrics.jsonl" if path.is_dir() or not path.suffix else path
