"""Event log: compile done, epoch summaries, warnings, checkpoints, errors, run end.

Events and evals come from the snapshot stamped with their arrival order (`_seq`, see
`tuitrain.metrics.sinks.TimelineStoreSink`), so epoch summaries and warnings interleave as they
happened; only records not yet shown are written (the log is append-only).
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import RichLog

from tuitrain.core.text import strip_controls
from tuitrain.metrics.format import precision_label
from tuitrain.metrics.records import Record, eval_metric_items
from tuitrain.metrics.sinks import SEQ_KEY, STEP_KEY
from tuitrain.metrics.store import Snapshot
from tuitrain.rundir.layout import METRICS_NAME
from tuitrain.ui.panels import (
    declared_metrics,
    eval_label,
    is_script_run,
    metric_spec,
    metric_text,
    metric_unit,
)
from tuitrain.ui.view import Frame

LEVEL_MARK = {"info": ("·", "foreground-darken-1"), "warning": ("▲", "warning")}
LEVEL_MARK["error"] = ("✖", "error")
LEVEL_MARK["traceback"] = (" ", "foreground-darken-2")
LEVEL_MARK["sample"] = ("│", "secondary")
MAX_SAMPLE_LINES = 40
# the step a message names ("paused at step 223", "sample at step 40:", "checkpoint saved at
# step 92"): an older run's pause and sample events carry no step field of their own
NAMED_STEP = re.compile(r"\bat step (\d{1,19})\b")
MAX_BURST = 200  # more new records at once (watch opening a long run): the newest only


def own_step(rec: Record) -> int | None:
    """The step a record is about: its `step` field, else the step its message names
    ("paused at step 223"); None when it names none (a warning, a run's start)."""
    value = rec.get("step")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    found = NAMED_STEP.search(str(rec.get("message") or ""))
    return int(found.group(1)) if found else None


def ordered_records(snap: Snapshot) -> list[Record]:
    """Events and evals in the order they happened.

    The dashboard's store copies carry an arrival stamp (`_seq`): the order they were
    written. Records read from a file by `watch` carry none: they go by step (their own, or
    the one their message names; an event that names none takes the step of the event
    before it), an evaluation before the events of its step (the engine evaluates, then
    saves the epoch's checkpoint), then file order; unstamped ones come before stamped ones.
    """
    keyed: list[tuple[int, float, int, int, Record]] = []
    for rank, records in ((1, snap.events), (0, snap.evals)):
        step: float = -1.0
        for i, rec in enumerate(records):
            value = own_step(rec)
            if value is not None:
                step = float(value)
            keyed.append((rec.get(SEQ_KEY, -1), step, rank, i, rec))
    keyed.sort(key=lambda t: t[:4])
    return [t[4] for t in keyed]


def eval_line(rec: Record, header: Record | None = None) -> str:
    """Where the evaluation happened (``epoch 2 done``, ``eval at step 50``), the validation
    loss with its declared unit, then each validation metric the record holds, formatted as
    the header declares it (a classifier's accuracy as a percentage). Only what the record
    holds: a script that logs `val/acc` alone gets no `val_loss —`."""
    declared = declared_metrics(header)
    parts: list[str] = []
    for name, value in eval_metric_items(rec):  # the task's validation metrics
        if value is None and name != "val_loss":
            continue
        spec = metric_spec(name, declared)
        text = f"{name} {metric_text(value, spec)}{metric_unit(spec) if value is not None else ''}"
        parts.insert(0, text) if name == "val_loss" else parts.append(text)
    return f"{eval_label(rec)}: {' · '.join(parts)}" if parts else eval_label(rec)


def started_line(header: Record) -> str:
    """The event log's first line: what started where (a script's device and run dir only
    once known: tuitrain run's header for a script that has not called init has neither)."""
    if is_script_run(header):  # a script: no preset, no precision of its own
        name, device = header.get("preset"), header.get("device")
        started = f"run started: {name} (a script)" + (f" on {device}" if device else "")
    else:
        started = (
            f"run started: preset {header.get('preset')} on {header.get('device')} "
            f"({precision_label(header)})"
        )
    run_dir = header.get("run_dir")
    return started + (f", run dir {run_dir}" if run_dir else "")


class EventLog(RichLog):
    """Append-only, auto-scrolling log of the run's notable moments."""

    _header: Record | None = None  # the run's header, for its metrics' declared formats

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=True, markup=False, highlight=False, max_lines=2000)
        self.border_title = "Events"
        self.reset()

    def reset(self) -> None:
        """Start over (a new run)."""
        self._last_seq = -1  # stamped records: shown up to this arrival number
        self._shown: set[int] = set()  # unstamped records (watch mode): ids shown
        self._seen_header: object = None
        self._seen_end: object = None
        self._version = -1
        self.clear()

    def style(self, name: str, **extra: Any) -> Style:
        return Style(color=self.app.theme_variables.get(name), **extra)

    def add(self, step: object, text: str, level: str = "info") -> None:
        mark, color = LEVEL_MARK.get(level, LEVEL_MARK["info"])
        step_text = str(step) if isinstance(step, int) else ""
        row = Table.grid(padding=(0, 1))
        row.add_column(width=6, justify="right", style=self.style("foreground-darken-3"))
        row.add_column(width=1, style=self.style(color, bold=True))
        row.add_column(ratio=1, style=Style() if level == "info" else self.style(color))
        row.add_row(step_text, mark, Text(strip_controls(text)))  # Text: never markup
        self.write_wrapped(row)

    def write_wrapped(self, line: RenderableType) -> None:
        """Write wrapped to the log's width (RichLog alone wraps to the console's width);
        continuation lines stay in the message column."""
        width = self.scrollable_content_region.width
        self.write(line, width=width if width > 0 else None)

    def refresh_text(self, frame: Frame) -> None:
        snap = frame.snap
        if snap.version == self._version:
            return
        self._version = snap.version
        if snap.header is not None and snap.header is not self._seen_header:
            self._seen_header = snap.header
            header = snap.header
            self.add(None, started_line(header))
        new = []
        for rec in ordered_records(snap):
            seq = rec.get(SEQ_KEY)
            if isinstance(seq, int):
                if seq <= self._last_seq:
                    continue
                self._last_seq = seq
            elif id(rec) in self._shown:
                continue
            else:
                self._shown.add(id(rec))
            new.append(rec)
        if len(new) > MAX_BURST:  # writing each one is ~0.4 ms of the UI thread
            skipped = len(new) - MAX_BURST
            self.add(None, f"… {skipped:,} earlier events and evaluations (all in {METRICS_NAME})")
            new = new[skipped:]
        self._header = snap.header  # the declaration: how each metric reads
        for rec in new:
            self.write_record(rec)
        if snap.end is not None and snap.end is not self._seen_end:
            self._seen_end = snap.end
            end = snap.end
            level = "error" if end.get("status") == "failed" else "info"
            self.add(end.get("step"), f"run {end.get('status')}: {end.get('reason')}", level)

    def write_record(self, rec: Record) -> None:
        if rec.get("kind") == "progress":  # a sign of life: the status bar's, not a line here
            return
        # the step column: the record's own step where it has or names one (the text and
        # the column agree), else the last train step when it arrived
        named = own_step(rec)
        step = named if named is not None else rec.get(STEP_KEY)
        if rec.get("type") == "eval":
            self.add(step, eval_line(rec, self._header))
            return
        level = str(rec.get("level") or "info")
        text = rec.get("text")
        if rec.get("kind") == "sample" and isinstance(text, str):  # a language model's text
            head = str(rec.get("message") or "sample").partition(":")[0]
            self.add(step, f"{head}:", level)
            for sample_line in text.splitlines()[:MAX_SAMPLE_LINES]:
                self.add(None, sample_line or " ", "sample")
            return
        traceback = rec.get("traceback")
        if traceback:
            for tb_line in str(traceback).rstrip().splitlines():
                self.add(None, tb_line, "traceback")
        self.add(step, str(rec.get("message", "")), level)
