"""What the engine says and does about its own train records, at log points only (no extra
host syncs): the data-wait notice at the start, and the alerts of `tuitrain.metrics.alerts`
(loss spike, scale collapse, throughput drop, memory creep, input-bound, straggler; a stall
from the step counter; a stalled rank from the rank watch, `tuitrain.engine.rankwatch`; a
non-finite loss), each an event record `"kind": "alert"` and an action: warn, pause,
checkpoint or stop. `alerts.on_alert` runs a shell command per alert
with the alert as JSON on its stdin, in a thread of its own: it never blocks the loop, has a
time limit, and its failure is a warning event, never a failed run."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tuitrain.core.control import Control
from tuitrain.core.errors import EXIT_FAILED
from tuitrain.core.hooks import run_hook
from tuitrain.metrics.alerts import Alert, AlertRules, nonfinite_metric
from tuitrain.metrics.records import alert_event, data_wait_verdict, event_record
from tuitrain.metrics.sinks import Sink


class Diagnostics:
    """Judges each train record as it is written; says what it finds and acts on alerts."""

    def __init__(
        self,
        sink: Sink,
        log_every: int,
        data: Mapping[str, Any],
        device: str,
        alerts: Mapping[str, Any] | None = None,
        control: Control | None = None,
        is_main: bool = True,
        precision: str = "fp32",
        bf16_native: bool = False,
    ) -> None:
        self.sink = sink
        self.log_every = log_every
        self.data = data  # the run's data config: the data-wait hint fits its loader
        self.device = device
        self.alerts = dict(alerts or {})
        self.rules = AlertRules(self.alerts)
        self.control = control
        self.is_main = is_main  # only rank 0 writes records and runs the on_alert command
        self.hooks: list[threading.Thread] = []
        self.precision = precision
        self.bf16_native = bf16_native
        self.advised = False  # the precision advice is given once per run
        self._lock = threading.Lock()  # the stall watch raises alerts from its own thread

    def check(self, record: Mapping[str, Any], step: int, nonfinite: Sequence[str] = ()) -> None:
        verdict, hint = data_wait_verdict(record["data_wait_frac"], self.data, self.device)
        if verdict != "ok" and step // self.log_every in (1, 2):  # a notice at the start
            pct = 100 * record["data_wait_frac"]
            kind = "input_bound" if verdict == "input-bound" else "data_wait"
            self.sink.write(
                event_record(
                    f"data wait {pct:.0f}% of step time ({verdict}): {hint}",
                    level="warning",
                    kind=kind,
                )
            )
        for alert in self.rules.judge(record, nonfinite):
            self.raise_alert(alert, step)
        self.advise(record, step)

    def advise(self, record: Mapping[str, Any], step: int) -> None:
        """fp16 where bf16 is native and the scaler skipped steps: bf16 needs no loss scale
        and skips none. Once per run (the GradScaler panel shows it)."""
        skipped = record.get("skipped_steps")
        if self.advised or self.precision != "fp16" or not self.bf16_native:
            return
        if not isinstance(skipped, int) or skipped <= 0 or step <= 0:
            return
        self.advised = True
        self.sink.write(
            event_record(
                f"fp16 skipped {skipped} of {step} steps ({skipped / step:.1%}) on a device "
                "with native bf16: --precision bf16 needs no loss scale and skips no step",
                level="info",
                kind="advice",
                skipped_steps=skipped,
                skip_rate=round(skipped / step, 4),
                suggest="--precision bf16",
            )
        )

    def raise_alert(self, alert: Alert, step: int | None) -> None:
        """The alert's event record, its action, and the on_alert command."""
        with self._lock:
            taken = self.act(alert)
            record = alert_event(
                alert.name, alert.action, alert.message, step, outcome=taken, **alert.figures
            )
            self.sink.write(record)
            if self.is_main and self.alerts.get("on_alert"):
                self.run_hook(dict(record))

    def act(self, alert: Alert) -> str:
        """Do what the alert's action says; the words for its event ('' for warn)."""
        control = self.control
        if control is None or alert.action == "warn":
            return ""
        if alert.action == "pause":
            control.pause()
            return "paused: press space, or resume from the UI"
        if alert.action == "checkpoint":
            control.request_checkpoint()
            return "a checkpoint is saved at the next step"
        if alert.action == "stop" and alert.name == "stalled_rank":  # stuck in a collective
            rank = alert.figures.get("rank")
            control.request_stop(f"stopped by alert {alert.name} (rank {rank})", EXIT_FAILED)
            return "every rank ends now, exit 1: no checkpoint, a collective cannot finish"
        if alert.action == "stop":
            control.request_stop(f"stopped by alert {alert.name}", exit_code=EXIT_FAILED)
            return "the run stops after saving"
        return ""

    def run_hook(self, record: Mapping[str, Any]) -> None:
        thread = threading.Thread(
            target=self._hook, args=(json.dumps(record),), name="tuitrain-on-alert", daemon=True
        )
        self.hooks.append(thread)
        thread.start()

    def _hook(self, payload: str) -> None:
        command = str(self.alerts["on_alert"])
        timeout = float(self.alerts.get("on_alert_timeout_s", 10.0))
        why = run_hook(command, payload, timeout)  # its own session, killed whole at the limit
        if why:
            with contextlib.suppress(Exception):  # the run may have ended: nothing to tell
                self.sink.write(
                    event_record(
                        f"the on_alert command failed ({why}): {command}",
                        level="warning",
                        kind="alert_hook",
                    )
                )

    def alert_nonfinite_metrics(self, names: list[str], step: int) -> None:
        """Validation metrics that came out NaN or Inf: the nonfinite_metric alert."""
        action = self.rules.action("nonfinite_metric")
        if action == "off":
            return
        message, figures = nonfinite_metric(names, step)
        self.raise_alert(Alert("nonfinite_metric", action, message, figures), step)

    def alert_nonfinite(self, step: int) -> None:
        """The loss became NaN or Inf: the run stops (a TrainingError follows), as it always
        did; the alert makes it an alert like the others (record, on_alert command)."""
        alert = Alert(
            "nonfinite_loss",
            "stop",
            f"the loss became NaN or Inf before step {step}",
            {},
        )
        with self._lock:
            record = alert_event(
                alert.name, alert.action, alert.message, step, outcome="the run stops"
            )
            self.sink.write(record)
            if self.is_main and self.alerts.get("on_alert"):
                self.run_hook(dict(record))  # the on_alert command reads the record written

    def close(self) -> None:
        """Wait for on_alert commands still running (each has its own time limit)."""
        limit = float(self.alerts.get("on_alert_timeout_s", 10.0)) + 1.0
        for thread in self.hooks:
            thread.join(limit)


class StallWatch:
    """No optimizer step for `alerts.stall_s` seconds while the run is running (not paused,
    not evaluating, not compiling): one stall alert per episode. A thread that reads the step
    counter the engine already keeps (Control.step) once a second: nothing per step."""

    def __init__(self, control: Control, diagnostics: Diagnostics, stall_s: float) -> None:
        self.control = control
        self.diagnostics = diagnostics
        self.stall_s = stall_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tuitrain-stall", daemon=True)

    def __enter__(self) -> StallWatch:
        if self.diagnostics.alerts.get("stall", "warn") != "off":
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _watch(self) -> None:
        poll = min(1.0, self.stall_s / 4)
        last_step, since = self.control.step, time.monotonic()
        stalled = False
        while not self._stop.wait(poll):
            step, now = self.control.step, time.monotonic()
            if step != last_step or self.control.state != "running":
                last_step, since, stalled = step, now, False
                continue
            if not stalled and now - since >= self.stall_s:
                stalled = True
                action = str(self.diagnostics.alerts.get("stall", "warn"))
                self.diagnostics.raise_alert(
                    Alert(
                        "stall",
                        action,
                        f"no optimizer step for {now - since:.0f} s after step {step}: a hung "
                        "data loader, a dead peer rank, or a device that stopped answering",
                        {"seconds": round(now - since, 1), "last_step": step},
                    ),
                    step,
                )
