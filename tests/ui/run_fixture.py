"""A finished run's directory, written by the real JsonlSink from the contract's builders, and
the `tuitrain watch` app over it (as `tuitrain.commands.watch.watch_one` opens it)."""

from __future__ import annotations

from pathlib import Path

from tests.ui.fake_records import records
from tuitrain.metrics.records import end_record
from tuitrain.metrics.sinks import JsonlSink
from tuitrain.metrics.store import MetricStore
from tuitrain.rundir.follow import JsonlFollower
from tuitrain.rundir.layout import METRICS_NAME
from tuitrain.ui.app import TuitrainApp


def finished_run(run_dir: Path, steps: int = 600) -> Path:
    """A CPU run of `steps` steps (a train record every 2, an evaluation every 200), ended:
    its metrics file's path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    sink = JsonlSink(run_dir / METRICS_NAME)
    try:
        for rec in records("bf16", "cpu", steps=steps):
            sink.write(rec)
        sink.write(end_record("completed", "reached the configured steps/epochs", steps))
    finally:
        sink.close()
    return run_dir / METRICS_NAME


def watch_app(path: Path) -> tuple[TuitrainApp, MetricStore]:
    """The watch app over a finished run, its records read once (the file does not grow)."""
    store = MetricStore()
    JsonlFollower(path, store).poll()
    app = TuitrainApp(store=store)
    app.watched_path = path
    return app, store
