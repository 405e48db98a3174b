"""`tuitrain.hf.TuitrainCallback`: a Hugging Face `TrainerCallback` that writes the Trainer's
logs as a tuitrain run.

    from tuitrain.hf import TuitrainCallback
    trainer = Trainer(..., callbacks=[TuitrainCallback()])   # report_to="none" is fine

`on_train_begin` starts the run with the TrainingArguments (and the model's config) as its
config; `on_log` writes `logs` at `state.global_step` (`loss`, `learning_rate`, `grad_norm`,
`epoch`; `eval_*` keys become evaluation metrics `val_*`). The end-of-training log (the mean
`train_loss`, `train_runtime` ...) is a summary, not a step: it goes to the run's summary (in
the end record), never over the last loss point. The run stays open after `train()`, so a
later `trainer.evaluate()` lands in it too; it ends at interpreter exit (the client's exit
hook writes the end record), at the next `train()`, or when you call `callback.run.finish()`.

Each `train()` is a run of its own (its own run dir; under `tuitrain run`, the next folder
beside the first, shown as run 2, 3 ...). A second `train()` in one process (a sweep, a
k-fold loop, a second stage with other arguments) starts its global step at 0 again: in the
same run its steps would go back, which the contract forbids (the client drops them, as
wandb does), and its loss curve would be drawn over the first one's. So `on_train_begin`
ends the run an earlier `train()` opened (completed: that train() returned) and opens a new
one with this train()'s arguments as its config; `evaluate()` after a `train()` lands in
that train()'s run, at its last step; an `evaluate()` before any `train()` opens the run
the first `train()` then continues (a baseline at step 0). A `run_dir` you pass is the first
train()'s; later ones get `<run_dir>-2`, `-3` ... beside it.
World process zero only, as the Trainer's own integrations do. Needs `transformers`.
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - said in one sentence
    raise ImportError(
        "tuitrain.hf needs the transformers package: pip install transformers"
    ) from exc

from tuitrain.client import core as client

SKIP = ("total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second")


class TuitrainCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(self, run_dir: str | None = None, name: str | None = None, **options: Any) -> None:
        self._run_dir, self._name, self._options = run_dir, name, options
        self.run: client.Run | None = None
        self.runs: list[client.Run] = []  # one a train() (and a leading evaluate()'s)
        self._trained = False  # the open run has seen a train() begin

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any
    ) -> None:
        if not state.is_world_process_zero:
            return
        if self.run is not None and not self.run.finished and self._trained:
            self.run.finish(status="completed", reason="train() returned; the next train()"
                            " is a run of its own")  # fmt: skip
        if self.run is not None and (self.run.finished or self._trained):
            self.run = None  # this train() opens its own run
        self._start(args, model)
        self._trained = True

    def _start(self, args: Any, model: Any) -> None:
        if self.run is not None:  # open: train() then evaluate(), evaluate() then train()
            return
        config: dict[str, Any] = {"args": args.to_dict() if hasattr(args, "to_dict") else {}}
        model_config = getattr(model, "config", None)
        if model_config is not None and hasattr(model_config, "to_dict"):
            config["model"] = model_config.to_dict()
        self.run = client.init(self._run_dir, config, self._name or "hf", **self._options)
        self.runs.append(self.run)
        self._trained = False

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               model: Any = None, **kw: Any) -> None:  # fmt: skip
        if not state.is_world_process_zero or not logs:
            return
        self._start(args, model)  # `trainer.evaluate()` alone starts the run too
        if self.run is None or self.run.finished:
            return
        if "train_runtime" in logs:  # the end-of-training summary: the mean train_loss ...
            for key, value in logs.items():
                if key != "epoch":
                    self.run.summary[key] = value
            return
        data = {
            k: v
            for k, v in logs.items()
            if k not in SKIP and not k.endswith(("_runtime", "_per_second"))
        }
        if data:
            self.run.log(data, step=state.global_step)
        if self.run.should_stop:  # an alert whose action is stop: the Trainer stops cleanly
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.run is not None and not self.run.finished and state.is_world_process_zero:
            self.run._flush_safely(final=True)  # on disk now; the exit hook ends the run
