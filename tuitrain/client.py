"""The logging client: any training script writes a tuitrain run.

    import tuitrain
    run = tuitrain.init(config={"lr": 3e-4})          # or: with tuitrain.init() as run:
    for step, batch in enumerate(loader):
        loss = train_step(batch)
        run.log({"loss": loss, "grad_norm": norm})   # tensors stay on the device
        if run.should_stop:                            # an alert whose action is stop
            break
    run.finish()

`log` never makes the host wait for the device: it appends the values (numbers or scalar
tensors on any device) to a list under a lock, and a flush thread, every `flush_every` calls
or `flush_s` seconds, stacks each device's tensors into one, copies it into pinned host memory
with one non-blocking transfer, records a CUDA event, and reads the values a flush later
(when the event has completed; `finish` waits for the last one). The records are the metric
contract of a hosted run: a header, train and eval records (`val/…`, `eval/…`, `val_…` and
`eval_…` keys are evaluation metrics and become `val_<name>`; `loss` or `train/loss` is the
loss; `lr` or `learning_rate` the learning rate; `epoch` the epoch; anything else is one of
the script's own metrics, under its own name), events, and an end record written by
`finish`, by an exception (its type and message), by SIGTERM or SIGINT, and at interpreter
exit without `finish`.

Steps follow wandb's and trackio's rule: without `step`, each call is the next step; an
explicit step moves the counter forward. The run dir comes from the argument, else
`TUITRAIN_RUN_DIR` (set by `tuitrain run -- CMD`), else `runs/<name>-<timestamp>`; the same
one-writer lock as a hosted run.

At each flush the flush thread also samples what a script rarely logs (host RSS, the CUDA
allocator's figures, NVML utilisation and device memory: `tuitrain.engine.telemetry`) into
the newest train record, and judges the train records with the alert rules; an alert whose
action is `stop` sets `run.should_stop`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import platform
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import tuitrain
from tuitrain.metrics.alerts import AlertRules
from tuitrain.metrics.records import end_record, event_record

__all__ = ["Run", "finish", "init", "log", "current"]

FLUSH_EVERY = 200  # log calls between flushes (also every FLUSH_S seconds)
FLUSH_S = 1.0
EVAL_PREFIXES = ("val/", "eval/", "validation/", "val_", "eval_")
LOSS_KEYS = ("loss", "train/loss", "train_loss")
LR_KEYS = ("lr", "learning_rate", "train/lr", "train/learning_rate")
CLIENT_ALERT_ACTIONS = ("off", "warn", "stop")  # what acting on a script can mean
SCRIPT_TASK: dict[str, Any] = {
    "name": "script",
    "primary": None,
    "mode": "min",
    "tolerance": None,
    "tokens": False,
    "metrics": [],  # a script declares none up front: readers chart every series it logs
}

_current: Run | None = None


def current() -> Run | None:
    """The run `init` started in this process (None before it and after `finish`)."""
    return _current


def init(
    run_dir: str | os.PathLike[str] | None = None,
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    **options: Any,
) -> Run:
    """Start a run (finishing one this process left open). See `Run` for the options."""
    global _current
    if _current is not None and not _current.finished:
        _current.finish()
    _current = Run(run_dir, config, name, **options)
    return _current


def log(data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
    """`run.log` on the current run (one is started on first use, like wandb)."""
    (_current if _current is not None and not _current.finished else init()).log(data, step, commit)


def finish(exit_code: int | None = None) -> None:
    if _current is not None:
        _current.finish(exit_code)


def script_name() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] else "")
    stem = Path(path).stem if path else ""
    return stem if stem and stem not in ("-c", "__main__") else "script"


def _plain(value: Any) -> Any:
    """A config value as JSON: numbers, text, lists and tables; anything else as its text."""
    return json.loads(json.dumps(value, default=str))


class Config(dict):  # type: ignore[type-arg]
    """The run's config: item and attribute access, `update` (wandb's `config`)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class Run:
    """One run of a script. `flush_every` log calls or `flush_s` seconds between flushes;
    `alerts`: the `[alerts]` rules ({"loss_spike": "stop", ...}; actions off, warn, stop)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        config: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        flush_every: int = FLUSH_EVERY,
        flush_s: float = FLUSH_S,
        alerts: Mapping[str, Any] | None = None,
        device: str | None = None,
    ) -> None:
        from tuitrain.engine.rundir import RunDirLock
        from tuitrain.metrics.sinks import JsonlSink

        self.name = name or script_name()
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        chosen = run_dir or os.environ.get("TUITRAIN_RUN_DIR") or f"runs/{self.name}-{stamp}"
        self.dir = Path(chosen)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = RunDirLock(self.dir)  # one writer, as for a hosted run
        self.sink = JsonlSink(self.dir / "metrics.jsonl")
        self.config = Config(_plain(dict(config or {})))
        self.summary: dict[str, Any] = {}
        self.should_stop = False
        self.finished = False
        self.flush_every, self.flush_s = max(int(flush_every), 1), float(flush_s)
        self._pending: list[tuple[int, float, dict[str, Any]]] = []
        self._mutex = threading.Lock()
        self._write = threading.Lock()  # records leave in order, from one thread at a time
        self._wake = threading.Event()
        self._calls = 0
        self._step = 0  # the next implicit step
        self._inflight: list[_Batch] = []
        self._last_row: tuple[int, float] | None = None  # (step, time) of the last train row
        self._said: set[str] = set()
        self._axes: dict[str, str] = {}  # define_metric: glob -> the metric that is its x
        self._started = time.perf_counter()
        self._exc: tuple[str, str] | None = None  # an uncaught exception: (type, message)
        self._signal: str | None = None
        self.last_step: int | None = None
        if alerts is None and os.environ.get("TUITRAIN_ALERTS"):  # from tuitrain run --alert
            with contextlib.suppress(ValueError, TypeError):
                alerts = dict(json.loads(os.environ["TUITRAIN_ALERTS"]))
        rules = {k: v for k, v in dict(alerts or {}).items()}
        for key, action in list(rules.items()):
            if isinstance(action, str) and action not in CLIENT_ALERT_ACTIONS and key != "on_alert":
                rules[key] = "warn"  # pause/checkpoint mean nothing for a foreign loop
        self.rules = AlertRules(rules)
        self._telemetry = _telemetry(device)
        self._write_header()
        self._thread = threading.Thread(target=self._loop, name="tuitrain-flush", daemon=True)
        self._thread.start()
        self._hooks()

    # ------------------------------------------------------------------ the script's side
    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
        """Keep `data` for the next flush: no conversion, no host sync (a few µs)."""
        if self.finished:
            return
        if step is None:
            at = self._step
            if commit:
                self._step += 1
        else:
            at = int(step)
            self._step = max(self._step, at + 1 if commit else at)
        axes = self._axes
        if axes:  # define_metric: some keys go on another metric's axis
            data = self._split_axes(data, axes, commit)
        with self._mutex:
            self._pending.append((at, time.perf_counter(), dict(data)))
        self._calls += 1
        if self._calls % self.flush_every == 0:
            self._wake.set()

    def define_metric(self, name: str, step_metric: str | None = None, **_: Any) -> None:
        """wandb's: `name` (a glob such as `val/*`) is plotted against `step_metric`'s value
        (its step is that value when a log call carries it)."""
        if step_metric:
            self._axes[name] = step_metric

    def _split_axes(
        self, data: Mapping[str, Any], axes: dict[str, str], commit: bool
    ) -> Mapping[str, Any]:
        import fnmatch

        rest = dict(data)
        for pattern, axis in axes.items():
            x = data.get(axis)
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                continue
            moved = {
                k: rest.pop(k) for k in list(rest) if k != axis and fnmatch.fnmatch(k, pattern)
            }
            if moved:
                with self._mutex:
                    self._pending.append((int(x), time.perf_counter(), moved))
        return rest

    def alert(self, title: str, text: str = "", level: str = "warning", **_: Any) -> None:
        """wandb's `run.alert`: an event in the run (the dashboard's banner shows it)."""
        self._emit([event_record(f"{title}: {text}" if text else title, level=level.lower(),
                                 kind="alert", alert="script")])  # fmt: skip

    def finish(self, exit_code: int | None = None, *, status: str | None = None,
               reason: str | None = None) -> None:  # fmt: skip
        """Flush everything (waiting for the last transfers), write the end record, release
        the run dir. Idempotent."""
        global _current
        if self.finished:
            return
        self.finished = True
        self._wake.set()
        self._thread.join(timeout=10)
        self._flush(final=True)
        if status is None:
            status, reason = self._outcome(exit_code)
        end = end_record(
            status,
            reason or "",
            self.last_step if self.last_step is not None else 0,
            elapsed_s=round(time.perf_counter() - self._started, 3),
            summary=_plain(self.summary) or None,
        )
        if exit_code is not None:
            end["exit_code"] = exit_code
        with self._write:
            self.sink.write(end)
            self.sink.close()
        self._lock_file.release()
        self._unhook()
        if _current is self:
            _current = None

    def _outcome(self, exit_code: int | None) -> tuple[str, str]:
        if self._signal is not None:
            return "stopped", f"stopped by {self._signal}"
        if self._exc is not None:
            kind, message = self._exc
            if kind == "KeyboardInterrupt":
                return "stopped", "stopped by SIGINT (KeyboardInterrupt)"
            return "failed", f"{kind}: {message}" if message else kind
        if exit_code:
            return "failed", f"the script finished with exit code {exit_code}"
        return "completed", "finish() called" if exit_code is not None else "finished"

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if exc is not None and not isinstance(exc, SystemExit):
            self._exc = (
                type(exc).__name__,
                str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
            )
        self.finish()

    # ------------------------------------------------------------------ the flush thread
    def _loop(self) -> None:
        while not self.finished:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            if self.finished:
                return
            with contextlib.suppress(Exception):  # a flush never kills the script
                self._flush()

    def _flush(self, final: bool = False) -> None:
        with self._mutex:
            pending, self._pending = self._pending, []
        if pending:
            self._inflight.append(_Batch(pending, self))
        out: list[dict[str, Any]] = []
        while self._inflight and (final or self._inflight[0].ready()):
            out.extend(self._records(self._inflight.pop(0).values()))
        if out:
            self._emit(out)

    def _emit(self, records: list[dict[str, Any]]) -> None:
        with self._write:
            for record in records:
                self.sink.write(record)
                if record.get("type") == "train":
                    for alert in self.rules.judge(record):
                        self._act(alert)
                        self.sink.write(
                            event_record(
                                f"alert {alert.name}: {alert.message}"
                                + (" (run.should_stop is set)" if alert.action == "stop" else ""),
                                level="warning", kind="alert", alert=alert.name,
                                action=alert.action, step=record.get("step"), **alert.figures,
                            )
                        )  # fmt: skip

    def _act(self, alert: Any) -> None:
        if alert.action == "stop":
            self.should_stop = True

    def _records(
        self, rows: list[tuple[int, float, dict[str, float | None]]]
    ) -> list[dict[str, Any]]:
        """Train and eval records from resolved rows (step, time, {key: float})."""
        out: list[dict[str, Any]] = []
        for step, at, values in rows:
            train: dict[str, Any] = {}
            val: dict[str, Any] = {}
            for key, value in values.items():
                name = eval_name(key)
                if name is not None:
                    val[name] = value
                elif key in LOSS_KEYS:
                    train["loss"] = value
                elif key in LR_KEYS:
                    train["lr"] = value
                else:
                    train[key] = value
                self.summary[key] = value
            if train:
                record: dict[str, Any] = {"type": "train", "step": step}
                if "epoch" in train:
                    record["epoch"] = train.pop("epoch")
                if "loss" in train:
                    record["loss"] = train.pop("loss")
                if self._last_row is not None and step > self._last_row[0]:
                    record["step_time_s"] = (at - self._last_row[1]) / (step - self._last_row[0])
                self._last_row = (step, at)
                record.update(train)
                out.append(record)
            if val:
                out.append({"type": "eval", "step": step, **val})
            self.last_step = step if self.last_step is None else max(self.last_step, step)
        trains = [r for r in out if r["type"] == "train"]
        if trains and self._telemetry is not None:
            with contextlib.suppress(Exception):
                for key, value in self._telemetry.read().items():
                    trains[-1].setdefault(key, value)
        return out

    def say_once(self, what: str) -> None:
        if what not in self._said:
            self._said.add(what)
            with contextlib.suppress(Exception):
                self._emit([event_record(what, level="warning", kind="client")])

    # ------------------------------------------------------------------ header and exits
    def _write_header(self) -> None:
        device = "cpu"
        name = platform.processor() or platform.machine()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"
            name = torch.cuda.get_device_name()
        header = {
            "type": "header",
            "preset": self.name,
            "config": {"script": dict(self.config)},
            "device": device,
            "device_name": name,
            "precision": None,
            "compile": None,
            "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
            "torch": getattr(torch, "__version__", None),
            "tuitrain": tuitrain.__version__,
            "python": platform.python_version(),
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "run_dir": str(self.dir),
            "hostname": socket.gethostname(),
            "argv": list(sys.argv),
            "client": True,
            "task": SCRIPT_TASK,
        }
        with self._write:
            self.sink.write(header)

    def update_config(self, values: Mapping[str, Any]) -> None:
        """Config set after init: kept, and written as a `config` event."""
        plain = _plain(dict(values))
        dict.update(self.config, plain)  # not a subclass's update (wandb's calls back here)
        self._emit([event_record("config updated", kind="config", config=plain)])

    def _hooks(self) -> None:
        atexit.register(self._at_exit)
        previous = sys.excepthook

        def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            text = str(exc).strip()
            self._exc = (kind.__name__, text.splitlines()[0][:500] if text else "")
            previous(kind, exc, tb)

        sys.excepthook = hook
        self._handled: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(signum) == signal.SIG_DFL:
                    signal.signal(signum, self._on_signal)
                    self._handled.append(signum)

    def _unhook(self) -> None:
        """The signals' default handling back (finish; the main thread only)."""
        if threading.current_thread() is threading.main_thread():
            for signum in self._handled:
                if signal.getsignal(signum) == self._on_signal:
                    signal.signal(signum, signal.SIG_DFL)
        self._handled = []

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signal = signal.Signals(signum).name
        raise SystemExit(128 + signum)  # through the script's finally blocks and atexit

    def _at_exit(self) -> None:
        if not self.finished:
            self.finish()


class _Batch:
    """One flush's values: numbers at once, each device's tensors in one non-blocking copy."""

    def __init__(self, rows: list[tuple[int, float, dict[str, Any]]], run: Run) -> None:
        self.rows: list[tuple[int, float, dict[str, float]]] = []
        self._slots: dict[Any, list[tuple[dict[str, float], str, Any]]] = {}
        self._host: dict[Any, Any] = {}
        self._events: list[Any] = []
        for step, at, data in rows:
            if self.rows and self.rows[-1][0] == step:  # commit=False, then the rest of it
                values = self.rows[-1][2]
                self.rows[-1] = (step, at, values)
            else:
                values = {}
                self.rows.append((step, at, values))
            for key, value in data.items():
                if not isinstance(key, str):
                    continue
                if isinstance(value, (int, float)):  # bools too: 0.0 / 1.0
                    values[key] = float(value)
                elif _is_tensor(value) and value.numel() == 1:
                    self._slots.setdefault(value.device, []).append((values, key, value))
                else:
                    run.say_once(
                        f"log: {key!r:.60} is a {type(value).__name__}, not a number or a"
                        " one-element tensor; tuitrain keeps numbers only (said once per key)"
                    )
        self._launch()

    def _launch(self) -> None:
        import torch

        for device, slots in self._slots.items():
            dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS: no fp64
            stacked = torch.stack([t.detach().reshape(()).to(dtype) for _, _, t in slots])
            if device.type == "cuda":
                host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
                host.copy_(stacked, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self._events.append(event)
                self._host[device] = host
            else:
                self._host[device] = stacked  # on the host already (CPU, or MPS synced)

    def ready(self) -> bool:
        return all(event.query() for event in self._events)

    def values(self) -> list[tuple[int, float, dict[str, float | None]]]:
        for event in self._events:
            event.synchronize()
        for device, slots in self._slots.items():
            read = self._host[device].tolist()
            for (values, key, _), value in zip(slots, read, strict=True):
                values[key] = value
        return [
            (step, at, {k: (v if math.isfinite(v) else None) for k, v in values.items()})
            for step, at, values in self.rows
        ]


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def eval_name(key: str) -> str | None:
    """`val/acc`, `eval/acc`, `eval_acc`, `val_acc` -> `val_acc`; None for other keys."""
    for prefix in EVAL_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            return "val_" + key[len(prefix) :].replace("/", "_")
    return None


def _telemetry(device: str | None) -> Any:
    try:
        import torch

        from tuitrain.engine.telemetry import Telemetry

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        return Telemetry(torch.device(device))
    except Exception:  # noqa: BLE001 - telemetry is a bonus, never a failure
        return None
