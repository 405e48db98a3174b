"""Where records go: a JSONL file, the console, a :class:`MetricStore`, or several.

Every sink has ``write(record)``, ``flush()`` and ``close()``; none mutates the
record it is given. :func:`read_jsonl` reads back what :class:`JsonlSink` wrote,
tolerating a truncated last line (a run killed mid-write, or a file being tailed).
The console's lines (`--no-ui`, train.log) open with the record's wall-clock time, HH:MM:SS
local.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import math
import os
import sys
import threading
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tuitrain.core.safefile import open_nofollow
from tuitrain.core.text import strip_controls
from tuitrain.metrics.format import (
    ETA_WINDOW,
    eta_seconds,
    format_record,
    format_train_line,
    is_error_record,
)
from tuitrain.metrics.records import (
    CONTRACT_FIELDS,
    MAX_HEADER_BYTES,
    MAX_RECORD_BYTES,
    Record,
    clean_record,
    record_time,
)
from tuitrain.metrics.store import MetricStore

__all__ = [
    "ConsoleSink",
    "FanOutSink",
    "JsonlSink",
    "NullSink",
    "Sink",
    "StoreSink",
    "to_json_line",
]


class Sink:
    """Base sink: every method is a no-op. Usable as a context manager (closes)."""

    def write(self, record: Record) -> None:
        """Consume one record."""

    def flush(self) -> None:
        """Push buffered output out."""

    def close(self) -> None:
        """Release resources; further writes are ignored. Idempotent."""

    def __enter__(self) -> Sink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class NullSink(Sink):
    """Discards everything."""


class FanOutSink(Sink):
    """Writes each record to every sink; one failing sink does not starve the others."""

    def __init__(self, *sinks: Sink) -> None:
        self.sinks: tuple[Sink, ...] = sinks

    def _each(self, method: str, *args: Any) -> None:
        error: BaseException | None = None
        for sink in self.sinks:
            try:
                getattr(sink, method)(*args)
            except Exception as exc:  # noqa: BLE001 - re-raised below
                error = error or exc
        if error is not None:
            raise error

    def write(self, record: Record) -> None:
        self._each("write", record)

    def flush(self) -> None:
        self._each("flush")

    def close(self) -> None:
        self._each("close")


class StoreSink(Sink):
    """Feeds a :class:`MetricStore` (the UI reads the store)."""

    def __init__(self, store: MetricStore) -> None:
        self.store = store

    def write(self, record: Record) -> None:
        self.store.push(record)


SEQ_KEY = "_seq"  # arrival order of a record, stamped on the store copy only
_ARRIVALS = itertools.count()  # shared by every sink of the process: always increasing
STEP_KEY = "_step"  # the latest train step when an event arrived


class TimelineStoreSink(Sink):
    """Feeds the store like `StoreSink`, stamping events and evals with arrival order.

    The stamps (`_seq`, `_step`) let the event log interleave events and epoch summaries in
    the order they happened and say at which step. Only the store's copy is stamped; the
    JSONL file and the console see the records unchanged.
    """

    def __init__(self, store: MetricStore) -> None:
        self.store = store
        self._step: Any = None

    def write(self, record: Record) -> None:
        # A field of the wrong type (a user task's metric, a hand-edited header) is left out
        # as `watch` leaves it out of a file: the dashboard reads numbers where numbers go.
        cleaned = clean_record(record)
        if cleaned is None:
            return
        record = cleaned
        kind = record.get("type")
        if kind == "train":
            self._step = record.get("step")
            self.store.push(record)
            return
        if kind in ("event", "eval"):
            step = record.get("step")
            if step is None:
                step = self._step
            elif kind == "eval":
                self._step = step  # the step the run has reached, for the events after it
            record = {**record, SEQ_KEY: next(_ARRIVALS), STEP_KEY: step}
        self.store.push(record)


def _clean(value: Any) -> Any:
    """A JSON-safe copy: non-finite floats become None, unknown objects str()."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_clean(v) for v in value]
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return _clean(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def to_json_line(record: Record) -> str:
    """One JSON object (no newline), key ``"type"`` first, NaN/inf written as null."""
    ordered: dict[str, Any] = {}
    if "type" in record:
        ordered["type"] = _clean(record["type"])
    for key, value in record.items():
        if key != "type":
            ordered[str(key)] = _clean(value)
    return json.dumps(ordered, allow_nan=False, ensure_ascii=False)


# fields a record over the line size always keeps (besides the contract's train fields)
PROTECTED = frozenset({"type", "step", "level", "message", "kind", "status", "reason"})


class JsonlSink(Sink):
    """Appends one JSON object per line to ``path``, flushed after every record.

    Append mode, so a resumed run continues the same file, always on a fresh line (a line
    left half-written by a killed writer is ended first). A write that fails (a full disk)
    is undone to the last whole record, said once on stderr, and ends this sink's writing,
    not the run: the console and train.log keep the records, checkpoints carry on.
    Thread-safe; ``close()`` is idempotent and writes after it are ignored.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.failed: str | None = None  # why writing stopped
        # unbuffered: nothing left in a buffer to land after a failed write has been cut back
        self._file: IO[bytes] | None = open_nofollow(self.path, "ab", buffering=0)
        self._good = self._file.tell()  # the size after the last whole record
        # where this sink's last header line starts: its end record names it (`header_at`),
        # so a reader finds the run's last segment without searching the file
        self.header_offset: int | None = None
        if self._good and not self._ends_with_newline():
            self._append(b"\n")

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    @property
    def closed(self) -> bool:
        """True once close() has run."""
        return self._file is None

    def _append(self, data: bytes) -> None:
        assert self._file is not None
        view = memoryview(data)
        try:
            while view:  # a raw write may be short (a disk filling up): write the rest
                written = self._file.write(view)
                if not written:
                    raise OSError(errno.ENOSPC, "No space left on device")
                view = view[written:]
        except OSError as exc:
            self._give_up(exc)
            return
        self._good += len(data)

    def _give_up(self, exc: OSError) -> None:
        """Cut the file back to its last whole record and stop writing to it."""
        file, self._file = self._file, None
        self.failed = exc.strerror or str(exc)
        with contextlib.suppress(OSError, ValueError):
            os.ftruncate(file.fileno(), self._good)  # type: ignore[union-attr]
        with contextlib.suppress(OSError, ValueError):
            file.close()  # type: ignore[union-attr]
        with contextlib.suppress(OSError, ValueError):
            print(
                f"tuitrain: {self.path} could not be written ({self.failed}); the records "
                "after its last whole line are not in it (the console and the run's line log "
                "have them), and the run goes on.",
                file=sys.stderr,
                flush=True,
            )

    def write(self, record: Record) -> None:
        kind = record.get("type")
        if kind == "end" and self.header_offset is not None and "header_at" not in record:
            record = {**record, "header_at": self.header_offset}
        text = to_json_line(record)
        limit = MAX_HEADER_BYTES if record.get("type") == "header" else MAX_RECORD_BYTES
        if len(text) * 4 >= limit - 1 and len(text.encode("utf-8")) >= limit:
            text = self._fit(record, limit - 1)
        line = (text + "\n").encode("utf-8")
        with self._lock:
            if self._file is not None:
                if kind == "header":
                    self.header_offset = self._good
                self._append(line)

    cut_fields = 0  # fields left out of records over the contract's line size (for the client)

    def _fit(self, record: Record, limit: int) -> str:
        """The record as one line of at most `limit` bytes: the largest fields outside the
        contract are left out first (`dropped_fields` counts them), then long texts cut."""
        keep = CONTRACT_FIELDS | PROTECTED
        sizes = {
            k: len(to_json_line({k: v}).encode("utf-8")) for k, v in record.items() if k not in keep
        }
        out = dict(record)
        total = len(to_json_line(out).encode("utf-8")) + 40
        dropped = 0
        for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
            if total <= limit:
                break
            del out[key]
            total -= sizes[key]
            dropped += 1
        if dropped:
            out["dropped_fields"] = dropped
            self.cut_fields += dropped
        text = to_json_line(out)
        if len(text.encode("utf-8")) > limit:  # the contract's own texts are too long: cut them
            for key, value in list(out.items()):
                if isinstance(value, str) and len(value) > 1000:
                    out[key] = value[:1000] + f"… [cut: {len(value.encode()):,} bytes]"
                elif (
                    isinstance(value, (dict, list))
                    and len(to_json_line({"v": value}).encode()) > limit // 4
                ):
                    out[key] = f"[cut: over {limit // 4:,} bytes]"
            text = to_json_line(out)
        return text

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.flush()
                except OSError as exc:
                    self._give_up(exc)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as exc:
                    self._give_up(exc)
                finally:
                    self._file = None


def console_clock(record: Record) -> str:
    """HH:MM:SS in local time: the record's wall-clock `time`, now for a record without one
    (an older writer's)."""
    when = record_time(record)
    return (when.astimezone() if when is not None else datetime.now()).strftime("%H:%M:%S")


class ConsoleSink(Sink):
    """Headless human output: one line per record; warnings and errors go to ``err``.

    ``out``/``err`` default to the *current* ``sys.stdout``/``sys.stderr`` at write time
    (so redirections made after construction are honoured). A console that goes away (the
    terminal hung up: EIO; a closed pipe: EPIPE) silences this sink, not the run: the JSONL
    file and the checkpoints carry on, and SIGHUP stops the run cleanly if it was sent.
    """

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self._out = out
        self._err = err
        self._lock = threading.Lock()
        self._closed = False
        self._total: int | None = None  # the header's total_steps: train lines say step/total
        self._header: Record | None = None  # the run's declaration: how eval and end lines read
        self._step_times: deque[float] = deque(maxlen=ETA_WINDOW)  # the ETA, as the dashboard's

    def declare(self, header: Record) -> None:
        """Read the run's header (how eval and end lines read, step N/total) without
        printing its line: a console that joins a run already shown (a detach)."""
        self._header = header
        self._total = header.get("total_steps") or None
        self._step_times.clear()

    def write(self, record: Record) -> None:
        kind = record.get("type")
        if kind == "header":
            self.declare(record)
        if kind == "train":
            line: str | None = self.train_line(record)
        else:
            line = format_record(record, self._header)
        if line is None:
            return
        # the wall clock first, so a spike or a stall in a log can be placed in time
        line = f"{console_clock(record)} {strip_controls(line)}"  # no escape codes from users
        to_err = is_error_record(record)
        stream = (self._err or sys.stderr) if to_err else (self._out or sys.stdout)
        with self._lock:
            if self._closed:
                return
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):  # ValueError: the stream was closed
                self._closed = True

    def train_line(self, record: Record) -> str:
        """The train line with step/total and the ETA from the median of recent step times."""
        step_time, step = record.get("step_time_s"), record.get("step")
        if isinstance(step_time, (int, float)):
            self._step_times.append(float(step_time))
        eta = eta_seconds(self._total, step if isinstance(step, int) else None, self._step_times)
        return format_train_line(record, self._total, eta)

    def flush(self) -> None:
        with self._lock:
            for stream in (self._out or sys.stdout, self._err or sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()

    def close(self) -> None:
        """Stops output; the streams themselves are not closed (they are not ours)."""
        with self._lock:
            self._closed = True
