"""Metrics layer: the record store the UI reads, and the sinks records are written to.

Pure standard library (no torch, textual or rich), so it can be used anywhere.
"""

from __future__ import annotations

from tuitrain.metrics.format import (
    format_end_line,
    format_eval_line,
    format_event_line,
    format_header_line,
    format_record,
    format_train_line,
    human_bytes,
)
from tuitrain.metrics.sinks import (
    ConsoleSink,
    FanOutSink,
    JsonlSink,
    NullSink,
    Sink,
    StoreSink,
)
from tuitrain.metrics.store import MetricStore, Series, Snapshot

__all__ = [
    "ConsoleSink",
    "FanOutSink",
    "JsonlSink",
    "MetricStore",
    "NullSink",
    "Series",
    "Sink",
    "Snapshot",
    "StoreSink",
    "format_end_line",
    "format_eval_line",
    "format_event_line",
    "format_header_line",
    "format_record",
    "format_train_line",
    "human_bytes",
]
