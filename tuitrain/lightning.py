"""`tuitrain.lightning.TuitrainLogger`: a Lightning `Logger`, like `CSVLogger` or `WandbLogger`.

    from tuitrain.lightning import TuitrainLogger
    trainer = L.Trainer(logger=TuitrainLogger(), log_every_n_steps=20)

`log_metrics` gets what `self.log(...)` logged, already host numbers: Lightning converts the
tensors only every `log_every_n_steps`, so the logger adds no sync of its own. Keys follow the
client's rule (`val_loss`, `val/acc` -> evaluation; `train_loss`, `loss` -> the loss), and
Lightning's own names are mapped as well, each original kept beside its mapping:
`train_loss_step` (`self.log(..., on_step=True, on_epoch=True)`) -> the loss,
`val_loss_epoch` -> `val/loss`, `valid_*` -> `val/*`, LearningRateMonitor's `lr-Adam` -> lr.
The hyperparameters are the run's config. The run stays open across `fit`, `validate` and
`test` in one process (their metrics all arrive): `finalize("success")` only flushes; the run
ends at interpreter exit (the client's exit hook writes the end record), on
`finalize("failed")`, or when you call `logger.experiment.finish()`. Rank zero
only (Lightning calls loggers on every rank; the other ranks write nothing). Needs the
`lightning` package (`pip install lightning`).
"""

from __future__ import annotations

import sys
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

try:
    from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
    from lightning.pytorch.utilities import rank_zero_only
except ImportError as exc:  # pragma: no cover - said in one sentence
    raise ImportError(
        "tuitrain.lightning needs the lightning package: pip install lightning"
    ) from exc

from tuitrain.client import core as client
from tuitrain.client.names import lightning_names

__all__ = ["TuitrainLogger", "lightning_names"]

LIGHTNING_STATUS = {"success": ("completed", "Lightning finished"),
                    "failed": ("failed", "Lightning reported a failure"),
                    "finished": ("completed", "Lightning finished")}  # fmt: skip


class TuitrainLogger(Logger):
    """Writes the Trainer's metrics as a tuitrain run (`run_dir`, else TUITRAIN_RUN_DIR, else
    runs/<name>-<timestamp>)."""

    def __init__(self, run_dir: str | None = None, name: str | None = None, **options: Any) -> None:
        super().__init__()
        self._run_dir, self._name, self._options = run_dir, name, options
        self._run: client.Run | None = None

    @property
    def name(self) -> str:
        return self._name or "lightning"

    @property
    def version(self) -> str:
        return str(self.experiment.dir.name) if self._run is not None else "0"

    @property
    def save_dir(self) -> str | None:
        return str(self._run.dir) if self._run is not None else self._run_dir

    @property
    @rank_zero_experiment
    def experiment(self) -> client.Run:
        if self._run is None:
            self._run = client.init(self._run_dir, None, self.name, **self._options)
        return self._run

    @rank_zero_only
    def log_hyperparams(
        self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any
    ) -> None:
        values = vars(params) if isinstance(params, Namespace) else dict(params or {})
        self.experiment.update_config(values)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Lightning's evaluation loops log per-batch values (`on_step=True` in
        `validation_step`) at their own batch counter, below the training step: those rows
        land at the run's current step (the step the evaluation ran at; the last batch's
        value is kept there, the epoch's mean arrives as `val/*`), not dropped as a step
        going back would be. One info event says so."""
        run = self.experiment
        if step is not None and step < run.highest_step:
            if "eval-counter" not in run._said:
                run._said.add("eval-counter")
                run.say_once(
                    f"Lightning logged at step {step}, below the run's step {run.highest_step}"
                    " (an evaluation loop's batch counter): such rows are placed at the run's"
                    " current step, the last value kept"
                )
            step = run.highest_step
        run.log(lightning_names(metrics), step)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Lightning calls this at the end of every `fit`, `validate` and `test`: "success"
        (and the SLURM requeue's "finished") only flush, so the next stage's metrics arrive
        in the same run; "failed" ends the run."""
        if self._run is None or self._run.finished:
            return
        if status != "failed" and self._run._exc is None and self._run._signal is None:
            self._run._flush_safely(final=True)  # on disk now; the exit hook ends the run
            return
        state, reason = LIGHTNING_STATUS.get(status, ("completed", f"Lightning: {status}"))
        if self._run._exc is not None or self._run._signal is not None:
            self._run.finish()  # an exception or a signal says more than the status
            return
        # Lightning calls finalize("failed") from inside its except clause, for an exception
        # and for an interrupt alike: the exception being handled says which it was
        handled = sys.exc_info()[1]
        if status == "failed" and handled is not None:
            name = type(handled).__name__
            if isinstance(handled, KeyboardInterrupt):
                state, reason = "stopped", "stopped by SIGINT (KeyboardInterrupt)"
            elif name == "SIGTERMException":  # Lightning's own, raised on SIGTERM
                state, reason = "stopped", "stopped by SIGTERM"
            else:
                text = str(handled).strip()
                first = text.splitlines()[0][:500] if text else ""
                state, reason = "failed", f"{name}: {first}" if first else name
        # Lightning re-raises the exception (exit 1) and ends an interrupt with sys.exit(1)
        self._run.finish(1, status=state, reason=reason)
