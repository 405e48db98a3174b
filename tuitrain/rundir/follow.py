"""Feed a MetricStore from a run's metrics file: replay it, then follow it as it grows.

For `tuitrain watch`, and the dashboard of a resumed run (`replay`). Robust to what real
files do: a truncated last line (a run killed mid-write) waits for its newline or is skipped,
unknown record types are ignored by the store, and a file that is replaced or truncated (a
new run in the same dir) starts over. A resumed run appends a header to its file: the store
keeps what the earlier segments pushed, so the charts still start at the run's first step.

Opening a long file stays fast and bounded: the store keeps a few thousand points per
series and the newest events anyway, so the catch-up parses the header, evals and end
records, the events the store keeps, and only a few thousand train records spread evenly
over the file plus the most recent ones; the others are found with bytes operations and
never become Python objects. Files are read in chunks of CHUNK_BYTES. A million-record
file (474 MB) is read in ~0.7 s, under 50 MB at the peak, on a 2-core VM (BENCHMARKS.md,
bench/watch_open.py).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from tuitrain.core.safefile import NotRegular, open_regular
from tuitrain.metrics.records import history_of
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.read import metrics_path, parse_line

TRAIN_PREFIX = b'{"type": "train"'
TRAIN_AFTER_NEWLINE = b"\n" + TRAIN_PREFIX
EVENT_PREFIX = b'{"type": "event"'
HEADER_PREFIX = b'{"type": "header"'  # a resumed run's later headers (rundir.summary finds them)
CATCHUP_TRAIN_POINTS = 4096  # at most this many older train records parsed (the store keeps ~2.5k)
CATCHUP_TAIL = 512  # and every one of the newest train records
NON_TRAIN_LINE = re.compile(rb'\n(?!\{"type": "train")([^\n]*)')  # the line after a newline
CHUNK_BYTES = 8 << 20  # read at most this much at once: memory stays bounded on huge files


_parse = parse_line  # runfile's: the same cleaning and limits as every reader's


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
            f = cast(BinaryIO, open_regular(self.path, "rb"))  # never blocks on a FIFO
        except (FileNotFoundError, NotRegular):
            return 0  # not there yet, being replaced, or not a file (watch refused it first)
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
            pushed = self._catch_up(f, stat.st_size) if first_read else self._read_all(f)
        self.records_read += pushed
        return pushed

    def _regions(self, f: BinaryIO) -> Iterator[tuple[int, bytes, int]]:
        """Chunk by chunk to the end of the file: (offset, buf, end). `buf` starts at a line
        start at file offset `offset`; buf[:end] holds complete lines and buf[end] is "\n"."""
        while data := f.read(CHUNK_BYTES):
            offset = self._offset - len(self._partial)
            self._offset += len(data)
            buf = self._partial + data
            end = buf.rfind(b"\n")
            self._partial = buf[end + 1 :]  # no newline yet: maybe still being written
            if end >= 0:
                yield offset, buf, end

    def _push_lines(self, lines: Iterable[bytes]) -> int:
        pushed = 0
        for line in lines:
            rec = _parse(line) if line.strip() else None
            if rec is not None:
                self.store.push(rec)
                pushed += 1
        return pushed

    def _read_all(self, f: BinaryIO) -> int:
        return sum(self._push_lines(buf[:end].split(b"\n")) for _, buf, end in self._regions(f))

    def _catch_up(self, f: BinaryIO, size: int) -> int:
        """First read: the non-train lines (of the events, only the newest the store keeps),
        a subset of the older train lines evenly spaced in the file and the newest
        CATCHUP_TAIL train lines; one chunk in memory at a time, and no Python object for
        the train lines it skips.

        Only the train lines the engine writes (`{"type": "train"` first) are thinned; they
        are pushed after the other records, which changes nothing the store keeps (train and
        eval records feed different series). The history holds the first train line at or
        after each multiple of `spacing` bytes; should the file grow past CATCHUP_TRAIN_POINTS
        of them meanwhile, the spacing doubles (the store's own scheme).
        """
        spacing = max(1, (size - self._offset) // CATCHUP_TRAIN_POINTS)
        picks: list[tuple[int, bytes]] = []  # (file offset, train line)
        target = 0  # the next pick: the first train line starting at or after this offset
        recent: list[tuple[int, bytes, int]] = []  # the last regions: the tail is in them
        counts: list[int] = []  # train lines at the end of each of them (CATCHUP_TAIL at most)
        events: deque[bytes] = deque(maxlen=self.store.max_events)  # the store keeps no more
        pushed = 0
        headers = 0  # headers pushed so far
        run_start = 0  # where the file's last run starts: a header without `history` after
        # another run's records (a run started again without --resume). The store forgets
        # the earlier run at that header; the events and train lines pushed after the loop
        # are taken from this offset on, so none of the earlier run's comes back.
        for offset, buf, end in self._regions(f):
            for pos, line in _other_lines(buf, end):  # header, evals, end: parsed, in order
                if line.startswith(EVENT_PREFIX):
                    events.append(line)
                    continue
                if line.startswith(HEADER_PREFIX):
                    rec = _parse(line)
                    if rec is not None and rec.get("type") == "header":
                        if headers and history_of(rec) is None:
                            run_start = offset + pos
                            events.clear()
                        headers += 1
                pushed += self._push_lines((line,))
            target = self._pick(picks, target, spacing, offset, buf, end)
            while len(picks) > CATCHUP_TRAIN_POINTS:
                spacing *= 2
                picks, target = _respace(picks, spacing), -(-target // spacing) * spacing
            recent.append((offset, buf, end))
            counts.append(_train_lines_at_end(buf, end, CATCHUP_TAIL))
            while len(recent) > 1 and sum(counts) - counts[0] >= CATCHUP_TAIL:
                del recent[0], counts[0]  # the newer regions hold the whole tail
        tail, tail_start = _last_train_lines(recent, CATCHUP_TAIL, begin=run_start)
        history = (line for off, line in picks if run_start <= off < tail_start)
        return (
            pushed + self._push_lines(events) + self._push_lines(history) + self._push_lines(tail)
        )

    @staticmethod
    def _pick(
        picks: list[tuple[int, bytes]], target: int, spacing: int, offset: int, buf: bytes, end: int
    ) -> int:
        """Append to `picks` the first train line at or after each multiple of `spacing`
        within buf's complete lines; returns the next target offset."""
        while target <= offset + end:
            pos = target - offset
            start = 0 if pos <= 0 else buf.find(b"\n", pos - 1, end + 1) + 1
            while start <= end and not buf.startswith(TRAIN_PREFIX, start):
                start = buf.find(b"\n", start, end + 1) + 1  # a rare other record: skip it
            if start > end:
                break  # the line starts in the next chunk
            picks.append((offset + start, buf[start : buf.find(b"\n", start, end + 1)]))
            target = ((offset + start) // spacing + 1) * spacing
        return target

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


def _other_lines(buf: bytes, end: int) -> Iterator[tuple[int, bytes]]:
    """The lines of buf[:end] that are not train lines as the engine writes them, each with
    where it starts in buf."""
    first = buf[: buf.find(b"\n", 0, end + 1)]
    if not first.startswith(TRAIN_PREFIX):
        yield 0, first
    for match in NON_TRAIN_LINE.finditer(buf, 0, end):
        yield match.start(1), match[1]


def _train_lines_at_end(buf: bytes, end: int, limit: int) -> int:
    """How many train lines buf[:end] holds, counted from its end up to `limit`."""
    count, pos = 0, end
    while count < limit:
        pos = buf.rfind(TRAIN_AFTER_NEWLINE, 0, pos)
        if pos < 0:
            return count + buf.startswith(TRAIN_PREFIX)
        count += 1
    return count


def _respace(picks: list[tuple[int, bytes]], spacing: int) -> list[tuple[int, bytes]]:
    """The picks a wider `spacing` keeps: the first one at or after each of its multiples."""
    kept: list[tuple[int, bytes]] = []
    target = 0
    for off, line in picks:
        if off >= target:
            kept.append((off, line))
            target = (off // spacing + 1) * spacing
    return kept


def _last_train_lines(
    regions: list[tuple[int, bytes, int]], count: int, begin: int = 0
) -> tuple[list[bytes], int]:
    """The last `count` train lines of these consecutive regions that start at file offset
    `begin` or later, and the file offset of the first of them (past the end when there is
    none)."""
    if not regions:
        return [], 0
    base = regions[0][0]
    data = b"".join(buf[: end + 1] for _, buf, end in regions)  # complete lines, each + "\n"
    tail: list[bytes] = []
    start = len(data) - 1  # index of the current line's "\n"
    tail_start = base + len(data)
    for line in reversed(data[:-1].split(b"\n")):
        start -= len(line)  # the current line's first byte
        if base + start < begin:
            break  # an earlier run's
        if line.startswith(TRAIN_PREFIX):
            tail.append(line)
            tail_start = base + start
            if len(tail) == count:
                break
        start -= 1  # the "\n" before it
    tail.reverse()
    return tail, tail_start


def replay(path: Path, store: MetricStore) -> int:
    """Read the run's file into `store` once, as `watch` opens it (the bounded catch-up):
    a resumed run's dashboard holds its earlier segments before the engine writes again.
    How many records were pushed (0 without a file)."""
    return JsonlFollower(path, store).poll()


def resolve_metrics_path(target: str | Path) -> Path:
    """A run dir or a metrics file's path -> the metrics file: `read.metrics_path`."""
    return metrics_path(target)
