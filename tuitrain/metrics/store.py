"""Bounded, thread-safe store of training records, read by the UI through snapshots.

The training thread calls :meth:`MetricStore.push` once per record (cheap: O(1)
amortised, one short lock). The UI calls :meth:`MetricStore.snapshot` a few times
per second and gets an immutable :class:`Snapshot`.

Every numeric field of a ``train`` record (other than ``step``) becomes a series
keyed by the field name, with x = ``step``; ``eval`` records feed their ``val_*`` fields
(``val_loss`` and each of the task's or the script's ``val_<name>``); an ``event`` of kind
``names`` gives the names a script logged its fields under (``Snapshot.aliases``).
Each series keeps a ring of the most recent points plus a decimated history (every k-th
point; when the history fills up, every other point is dropped and k doubles), so memory
stays bounded whatever the run length.

A run is every segment it resumed: a later ``header`` (``tuitrain --resume`` appends one)
replaces the header and clears the end record, and keeps every series, evaluation and event
the earlier segments pushed, so the charts start at the run's first step. Only ``reset``
forgets (a new run: another preset, a file replaced or truncated).
"""

from __future__ import annotations

import math
import numbers
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tuitrain.metrics.records import Record, add_aliases, history_of, valid_step

__all__ = ["MetricStore", "Series", "Snapshot"]

RING_SIZE = 512
HISTORY_CAPACITY = 2048
MAX_EVALS = 1000
MAX_EVENTS = 500
MAX_SERIES = 256


_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Series:
    """One metric over steps: ``xs`` ascending without duplicates, ``ys`` aligned."""

    xs: tuple[float, ...] = ()
    ys: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.xs)

    @property
    def last(self) -> float | None:
        """The most recent value, or None for an empty series."""
        return self.ys[-1] if self.ys else None

    def decimate(self, buckets: int) -> tuple[list[float], list[float]]:
        """Reduce to at most ``2 * buckets`` points, keeping each bucket's min and max.

        Buckets split the x range evenly (one bucket per plot column, say). Within a
        bucket the min and max points are kept in x order, so spikes survive.
        Non-finite y values (NaN, inf) are left out: a plot cannot scale to them.
        """
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets}")
        xs, ys = self.xs, self.ys
        n = len(xs)
        if n <= 2 * buckets:
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
            return [p[0] for p in pts], [p[1] for p in pts]
        x0 = xs[0]
        span = xs[-1] - x0
        scale = buckets / span if span > 0 else 0.0
        out_x: list[float] = []
        out_y: list[float] = []
        cur = -1
        lo_i = hi_i = -1
        isfinite = math.isfinite

        def flush() -> None:
            if lo_i < 0:
                return
            if lo_i == hi_i:
                out_x.append(xs[lo_i])
                out_y.append(ys[lo_i])
                return
            for i in (lo_i, hi_i) if lo_i < hi_i else (hi_i, lo_i):
                out_x.append(xs[i])
                out_y.append(ys[i])

        for i in range(n):
            y = ys[i]
            if not isfinite(y):
                continue
            b = min(int((xs[i] - x0) * scale), buckets - 1)
            if b != cur:
                flush()
                cur = b
                lo_i = hi_i = i
            else:
                if y < ys[lo_i]:
                    lo_i = i
                if y > ys[hi_i]:
                    hi_i = i
        flush()
        return out_x, out_y


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the store at one moment (record mappings are read-only)."""

    version: int = 0
    header: Mapping[str, Any] | None = None
    latest: Mapping[str, Any] | None = None
    last_eval: Mapping[str, Any] | None = None
    evals: tuple[Mapping[str, Any], ...] = ()
    events: tuple[Mapping[str, Any], ...] = ()
    end: Mapping[str, Any] | None = None
    series: Mapping[str, Series] = field(default_factory=lambda: _EMPTY)
    # {field: the name a script logged it under} (records.aliases): `val_top1` -> `eval_top1`
    aliases: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def get(self, name: str) -> Series:
        """The series called ``name``, or an empty one."""
        return self.series.get(name) or Series()


class _Buffer:
    """Ring of recent points plus decimated history for one series (not locked)."""

    __slots__ = ("countdown", "history", "k", "ring", "version")

    def __init__(self, ring_size: int) -> None:
        self.ring: deque[tuple[float, float]] = deque(maxlen=ring_size)
        self.history: list[tuple[float, float]] = []
        self.k = 1
        self.countdown = 0
        self.version = 0


def _placeable(step: object) -> bool:
    """A step the store can put on its x axis: none at all, or a valid one (numpy's
    integers count as integers)."""
    if step is None or valid_step(step):
        return True
    return (
        isinstance(step, numbers.Integral) and not isinstance(step, bool) and valid_step(int(step))
    )


def _is_number(value: object) -> bool:
    """True for real numbers (int, float, numpy scalars...), False for bool and the rest."""
    t = type(value)
    return t is float or t is int or (isinstance(value, numbers.Real) and t is not bool)


class MetricStore:
    """Bounded, thread-safe store of records; see the module docstring."""

    def __init__(
        self,
        ring_size: int = RING_SIZE,
        history_capacity: int = HISTORY_CAPACITY,
        max_evals: int = MAX_EVALS,
        max_events: int = MAX_EVENTS,
        max_series: int = MAX_SERIES,
    ) -> None:
        if ring_size < 1 or history_capacity < 2:
            raise ValueError("ring_size must be >= 1 and history_capacity >= 2")
        self._ring_size = ring_size
        self._history_capacity = history_capacity
        self._max_evals = max_evals
        self._max_events = max_events
        self._max_series = max_series
        self._lock = threading.Lock()
        self._snap_lock = threading.Lock()  # serialises snapshot() callers (cache)
        self._version = 0
        self._cache: dict[str, Series] = {}
        self._cache_versions: dict[str, int] = {}
        self._last_snapshot = Snapshot()
        self._clear()

    def _clear(self) -> None:
        self._header: Record | None = None
        self._latest: Record | None = None
        self._last_eval: Record | None = None
        self._end: Record | None = None
        self._evals: deque[Record] = deque(maxlen=self._max_evals)
        self._events: deque[Record] = deque(maxlen=self._max_events)
        self._series: dict[str, _Buffer] = {}
        self._aliases: dict[str, str] = {}  # kept apart: the events' deque drops old ones

    @property
    def version(self) -> int:
        """Bumped on every push and reset."""
        return self._version

    @property
    def max_events(self) -> int:
        """How many of the newest event records are kept (older ones are dropped)."""
        return self._max_events

    def push(self, record: Mapping[str, Any]) -> None:
        """Add one record (the caller's dict is copied shallowly, never mutated). A train or
        eval record whose step is outside the contract's range (an integer in 0..STEP_MAX;
        null: no step, no point) is left out: no reader can place it on an x axis."""
        kind = record.get("type")
        if kind in ("train", "eval") and not _placeable(record.get("step")):
            return
        rec = MappingProxyType(dict(record))
        with self._lock:
            self._version += 1
            if kind == "train":
                self._latest = rec
                self._add_points(rec, rec.items(), skip_step=True)
            elif kind == "eval":
                self._last_eval = rec
                self._evals.append(rec)
                # every validation metric (val_loss, the task's or the script's val_<name>)
                points = ((n, v) for n, v in rec.items() if n.startswith("val_"))
                self._add_points(rec, points, skip_step=False)
            elif kind == "event":
                self._events.append(rec)
                add_aliases(self._aliases, rec)
            elif kind == "header":
                if self._header is not None and history_of(rec) is None:
                    self._clear()  # a new run in the same file (no --resume): its own alone
                self._header = rec
                self._end = None  # a resumed run appends a header (with its `history`): it
                # runs again, and its earlier segments' series stay (the run is all of them)
            elif kind == "end":
                self._end = rec

    def _add_points(
        self, rec: Record, items: Iterable[tuple[str, Any]], *, skip_step: bool
    ) -> None:
        """Append (step, value) to each numeric field's series. Caller holds the lock."""
        x = rec.get("step")
        if x is None:
            return
        x = int(x)  # a numpy integer too (push checked the range)
        version = self._version
        series = self._series
        for name, y in items:
            if y is None or (skip_step and name == "step"):
                continue
            t = type(y)
            if t is not float and t is not int and not _is_number(y):
                continue
            buf = series.get(name)
            if buf is None:
                if len(series) >= self._max_series:
                    continue
                buf = series[name] = _Buffer(self._ring_size)
            point = (x, y)
            buf.ring.append(point)
            buf.version = version
            if buf.countdown:
                buf.countdown -= 1
                continue
            hist = buf.history
            hist.append(point)
            if len(hist) >= self._history_capacity:
                del hist[1::2]
                buf.k *= 2
            buf.countdown = buf.k - 1

    def reset(self) -> None:
        """Forget everything (the UI switched preset); bumps the version."""
        with self._lock:
            self._version += 1
            self._clear()

    def snapshot(self) -> Snapshot:
        """An immutable copy of the current state; unchanged series reuse cached tuples."""
        with self._snap_lock:
            stale: list[tuple[str, int, list[tuple[float, float]], list[tuple[float, float]]]]
            stale = []
            with self._lock:
                version = self._version
                if version == self._last_snapshot.version:
                    return self._last_snapshot
                header, latest, last_eval, end = (
                    self._header,
                    self._latest,
                    self._last_eval,
                    self._end,
                )
                evals = tuple(self._evals)
                events = tuple(self._events)
                aliases = MappingProxyType(dict(self._aliases))
                names = list(self._series)
                cache_versions = self._cache_versions
                for name, buf in self._series.items():
                    if cache_versions.get(name) != buf.version:
                        stale.append((name, buf.version, list(buf.history), list(buf.ring)))
            # Merging happens outside the store lock: push() is never kept waiting.
            for name, buf_version, history, ring in stale:
                self._cache[name] = _merge(history, ring)
                cache_versions[name] = buf_version
            if len(self._cache) != len(names):
                keep = set(names)
                for name in [n for n in self._cache if n not in keep]:
                    del self._cache[name]
                    del cache_versions[name]
            snap = Snapshot(
                version=version,
                header=header,
                latest=latest,
                last_eval=last_eval,
                evals=evals,
                events=events,
                end=end,
                series=MappingProxyType({n: self._cache[n] for n in names}),
                aliases=aliases,
            )
            self._last_snapshot = snap
            return snap


def _merge(history: list[tuple[float, float]], ring: list[tuple[float, float]]) -> Series:
    """History then ring, sorted by x; on a duplicate x the most recent value wins."""
    points: dict[float, float] = dict(history)
    points.update(ring)
    if not points:
        return Series()
    xs = sorted(points)  # usually ascending already; timsort makes that O(n)
    return Series(xs=tuple(map(float, xs)), ys=tuple(float(points[x]) for x in xs))
