"""Feed a MetricStore from a metrics.jsonl file: replay it, then follow it as it grows.

For `tuitrain watch`. Robust to what real files do: a truncated last line (a run killed
mid-write) waits for its newline or is skipped, unknown record types are ignored by the
store, and a file that is replaced or truncated (a new run in the same dir) starts over.

Opening a long file stays fast and bounded: the store keeps a few thousand points per
series anyway, so the catch-up parses every non-train record but only an evenly strided
subset of the train records plus the most recent ones, and files are read in chunks of
CHUNK_BYTES (a million-record file, 470 MB, opens in about half a second with a few tens of
MB of memory: bench/watch_open.py).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from tuitrain.metrics.store import MetricStore

TRAIN_PREFIX = b'{"type": "train"'
CATCHUP_TRAIN_POINTS = 4096  # at most this many older train records parsed (the store keeps ~2.5k)
CATCHUP_TAIL = 512  # and every one of the newest train records
CHUNK_BYTES = 8 << 20  # read at most this much at once: memory stays bounded on huge files


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
            f = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return 0  # not there yet, or being replaced: try again later
        with f:
            stat = os.fstat(f.fileno())  # of the file opened, even if replaced meanwhile
            if self._inode is not None and (
                stat.st_ino != self._inode or stat.st_size < self._offset
            ):
                self._start_over()
            self._inode = stat.st_ino
            if stat.st_size == self._offset:
                return 0
            f.seek(self._offset)
            first_read = self.records_read == 0 and self._partial == b""
            pushed = self._catch_up(f) if first_read else self._read_all(f)
        self.records_read += pushed
        return pushed

    def _chunks(self, f: BinaryIO) -> Iterator[list[bytes]]:
        """The complete lines from the offset to the end of the file, chunk by chunk."""
        while data := f.read(CHUNK_BYTES):
            self._offset += len(data)
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()  # no newline yet: maybe still being written
            yield lines

    def _push_lines(self, lines: Iterable[bytes]) -> int:
        pushed = 0
        for line in lines:
            rec = _parse(line) if line.strip() else None
            if rec is not None:
                self.store.push(rec)
                pushed += 1
        return pushed

    def _read_all(self, f: BinaryIO) -> int:
        return sum(self._push_lines(lines) for lines in self._chunks(f))

    def _catch_up(self, f: BinaryIO) -> int:
        """First read: every non-train line, an evenly strided subset of the older train
        lines and the newest CATCHUP_TAIL train lines, holding one chunk at a time.

        Only the train lines the engine writes (`{"type": "train"` first) are thinned; they
        are pushed after the other records, which changes nothing the store keeps (train and
        eval records feed different series). Kept train lines are those whose index is a
        multiple of `stride`; when more than CATCHUP_TRAIN_POINTS are kept, every other one
        is dropped and the stride doubles (the store's own scheme).
        """
        kept: list[bytes] = []  # train lines 0, stride, 2*stride, ... (older than the tail)
        stride = 1
        n_train = 0  # train lines seen so far
        tail: list[bytes] = []
        pushed = 0
        for lines in self._chunks(f):
            train = [line for line in lines if line.startswith(TRAIN_PREFIX)]
            if len(train) < len(lines):  # evals, events, header, end: parsed now, in order
                pushed += self._push_lines(
                    line for line in lines if not line.startswith(TRAIN_PREFIX)
                )
            # The tail moves on: lines leaving it join the strided history.
            tail += train
            older, tail = tail[:-CATCHUP_TAIL], tail[-CATCHUP_TAIL:]
            first = (-n_train) % stride
            kept += older[first::stride]
            n_train += len(older)
            while len(kept) > CATCHUP_TRAIN_POINTS:
                del kept[1::2]
                stride *= 2
        return pushed + self._push_lines(kept) + self._push_lines(tail)

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
