"""The one state rule: what a run's records and its lock say about it (`run_status`).

The end record's status (completed, failed, stopped); without one, crashed when the run
dir's lock file is there and no process holds it (`writer_gone`) and nothing more is coming;
silent when the file has been still longer than max(SILENT_FLOOR_S, SILENT_INTERVALS log
intervals), the log interval being the last train record's step_time_s x the header's
train.log_every, or SILENT_UNKNOWN_S where either is unknown (a script's run through the
client); else running.

Every reader asks `run_status` with what it knows: `tuitrain runs` and the endings
(`rundir.summary`, which reads the file at once and checks it did not grow meanwhile), and
the viewers (the dashboard in watch mode, `watch --compare`), which follow the file and
know the writer exited once `writer_exited` says so. The viewers' own states (starting,
paused, pausing ...) sit on top of it, in `tuitrain.ui.view`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuitrain.rundir.lock import writer_gone

SILENT_FLOOR_S = 120.0  # a run without an end record this quiet may have died ...
SILENT_INTERVALS = 10  # ... or this many of its own log intervals, whichever is longer
SILENT_UNKNOWN_S = 600.0  # ... or this long where its log interval is unknown
EXITED_QUIET_S = 1.0  # a follower: the lock free and the file this still, no end is coming


def quiet_seconds(path: Path) -> float | None:
    """Seconds since `path` last changed (None when it cannot be read)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return None


def writer_exited(run_dir: Path, quiet_s: float | None) -> bool:
    """What a follower of a run's file knows of its writer: the run dir's lock is free
    (`writer_gone`) and the file has been still for EXITED_QUIET_S, so an end record
    written just before the writer exited has been read by then."""
    return quiet_s is not None and quiet_s >= EXITED_QUIET_S and writer_gone(run_dir)


def log_interval_s(
    header: Mapping[str, Any] | None, latest: Mapping[str, Any] | None
) -> float | None:
    """The seconds between two log points: the last train record's step_time_s x the
    header's train.log_every; None when either is unknown."""
    config = (header or {}).get("config")
    train = config.get("train") if isinstance(config, Mapping) else None
    log_every = train.get("log_every") if isinstance(train, Mapping) else None
    step_time = (latest or {}).get("step_time_s")
    if not isinstance(log_every, int) or isinstance(log_every, bool) or log_every <= 0:
        return None
    if not isinstance(step_time, (int, float)) or not math.isfinite(step_time) or step_time < 0:
        return None
    return float(step_time) * log_every


def silent_after_s(header: Mapping[str, Any] | None, latest: Mapping[str, Any] | None) -> float:
    """How long a run without an end record may write nothing before it reads silent:
    max(SILENT_FLOOR_S, SILENT_INTERVALS log intervals), SILENT_UNKNOWN_S without one."""
    interval = log_interval_s(header, latest)
    if interval is None:
        return SILENT_UNKNOWN_S
    return max(SILENT_FLOOR_S, SILENT_INTERVALS * interval)


def run_status(
    header: Mapping[str, Any] | None,
    end: Mapping[str, Any] | None,
    latest: Mapping[str, Any] | None,
    quiet_s: float | None,
    writer_exited: bool,
) -> str:
    """completed / failed / stopped (the end record's), crashed (no end record and its
    writer exited: `writer_exited`), silent (see silent_after_s), else running."""
    if end is not None:
        return str(end.get("status") or "stopped")
    if writer_exited:
        return "crashed"
    if quiet_s is not None and quiet_s > silent_after_s(header, latest):
        return "silent"
    return "running"
