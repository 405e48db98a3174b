"""`tuitrain.hf.TuitrainCallback`: a Hugging Face `TrainerCallback` that writes the Trainer's
logs as a tuitrain run.

    from tuitrain.hf import TuitrainCallback
    trainer = Trainer(..., callbacks=[TuitrainCallback()])   # report_to="none" is fine

`on_train_begin` starts the run with the TrainingArguments (and the model's config) as its
config; `on_log` writes `logs` at `state.global_step` (`loss`, `learning_rate`, `grad_norm`,
`epoch`; `eval_*` keys become evaluation metrics `val_*`). The end-of-training log (the mean
`train_loss`, `train_runtime` ...) is a summary, not a step: it goes to the run's summary (in
the end record), never over the last loss point. The run stays open after `train()`, so a
later `trainer.evaluate()` (or a second `train()`) lands in it too; it ends at interpreter exit
(the client's exit hook writes the end record), or when you call `callback.run.finish()`.
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

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any
    ) -> None:
        if state.is_world_process_zero:
            self._start(args, model)

    def _start(self, args: Any, model: Any) -> None:
        if self.run is not None:  # one run per callback, open until the process ends
            return
        config: dict[str, Any] = {"args": args.to_dict() if hasattr(args, "to_dict") else {}}
        model_config = getattr(model, "config", None)
        if model_config is not None and hasattr(model_config, "to_dict"):
            config["model"] = model_config.to_dict()
        self.run = client.init(self._run_dir, config, self._name or "hf", **self._options)

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
