"""The training loop of one run: the step, the epoch, evaluation, log points.

The step in `Trainer.train_step` reads top to bottom: forward under autocast, loss, scaled
backward, unscale, clip, step/update, zero_grad. The loop polls the control object at step
boundaries and writes records into a sink; it never calls UI code.
"""

from __future__ import annotations

import contextlib
import math
import platform
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import tuitrain
from tuitrain.core.config import Config
from tuitrain.core.control import Control
from tuitrain.core.errors import TrainingError
from tuitrain.engine.checkpoint import check_compatible, rng_state, set_rng_state
from tuitrain.engine.device import synchronize
from tuitrain.engine.diagnostics import Diagnostics
from tuitrain.engine.memsnap import MemorySnapshot
from tuitrain.engine.meter import IntervalMeter
from tuitrain.engine.precision import bf16_supported
from tuitrain.engine.profiling import StepProfiler
from tuitrain.engine.ranktime import ForwardClock
from tuitrain.engine.rankwatch import Progress
from tuitrain.engine.setup import DistInfo, RunParts
from tuitrain.engine.state import FORMAT_VERSION, is_number
from tuitrain.engine.tasks.base import (
    batch_size_of,
    eval_key,
    split_training_output,
    validation_values,
)
from tuitrain.engine.tasks.build import task_label
from tuitrain.metrics.records import CLASSIFY_PRIMARY, eval_record, event_record
from tuitrain.metrics.sinks import Sink
from tuitrain.rundir.layout import RunDir

# The GradScaler skips optimizer.step() on overflow; the schedule still advances (on purpose:
# the step counter is the schedule's clock), which torch reports as a misuse. It is not.
PROGRESS_EVERY_S = 10.0  # no record for this long: a `progress` event, a sign of life
PLATEAU_EVALS = 3  # evaluations without a better primary metric that make a plateau

warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")


class Trainer:
    """Owns the parts of one run and the loop state (step, epoch, position in the epoch),
    and gives and takes that state whole: `state_dict()` / `load_state_dict()`."""

    def __init__(
        self,
        cfg: Config,
        parts: RunParts,
        sink: Sink,
        control: Control,
        dist: DistInfo,
        files: RunDir | None,
    ) -> None:
        self.cfg, self.parts, self.sink, self.control = cfg, parts, sink, control
        self.dist, self.files = dist, files  # the run dir (None: a run that keeps no files)
        self.task = parts.task
        self.label = task_label(cfg)
        self.strategy = parts.strategy
        self.count_tokens = self.task.counts_tokens
        self._said_at = (time.monotonic(), 0)  # (when, step) the last record was written
        self._logged_step: int | None = None  # the last log point's step (a train record)
        self.meter = IntervalMeter(
            parts.device,
            parts.precision,
            dist.world_size,
            flops_per_sample=parts.flops_per_sample,
            peak_tflops=parts.peak.tflops,
            metric_names=parts.train_metrics,
            count_tokens=self.count_tokens,
        )
        # DDP: each rank's own forward time shows a straggler. Hooks on the inner module,
        # except under compile (they would break the graph): there the step times the call.
        self.timed_forward: Callable[[], contextlib.AbstractContextManager[None]]
        self.timed_forward = contextlib.nullcontext
        if dist.world_size > 1:
            clock = self.meter.forward_clock = ForwardClock(parts.device)
            if parts.compiled:
                self.timed_forward = clock.timed
            else:
                clock.attach(parts.model)
        self.progress = Progress()  # how far into the step it is: the rank watch reads it
        self.meter.comm_clock = self.strategy.comm_clock  # DDP, FSDP: time in collectives
        self.profiler = StepProfiler(parts.device, files)
        self.memory = MemorySnapshot(parts.device, files, enabled=dist.is_main)
        self.step = 0
        self.epoch = 0
        self.epoch_step = 0  # optimizer steps done in the current epoch
        self.last_saved_step = -1
        self.state_sound = True  # False while a step is half applied
        self.start_step = 0
        self.fitting = False  # fit() began: the steps from start_step on were trained here
        self.stop_wanted = self.pause_wanted = self.checkpoint_wanted = False
        self.samples = 0
        self.val_metrics: dict[str, float | None] = {}  # the last eval record's metrics
        info = parts.task_info or {}
        self.primary: str | None = info.get("primary")  # its eval field: val_loss, val_bpc ...
        self.mode: str = info.get("mode", "min")
        self.best: float | None = None  # the primary metric's best so far
        self.evals_since_best = 0
        self.plateau_advised = False
        self.at_chance_said = False
        self.checkpoint_failure: str | None = None  # why the last failed checkpoint failed
        self.val_loss: float | None = None
        # per val item, in the val order, of the last evaluation: classify, right or not
        # (device bools); other tasks, the primary metric's value per item (device floats,
        # None when the task gives batch means only). Parity pairs two runs' items with it.
        self.val_correct: torch.Tensor | None = None
        self.throughputs: list[float] = []
        settings = cfg.to_dict()
        self.diagnostics = Diagnostics(
            sink,
            cfg.train.log_every,
            settings["data"],
            str(parts.device),
            alerts={
                **settings["alerts"],
                "chance_loss": self.task.chance.get("loss"),
            },
            control=control,
            is_main=dist.is_main,
            precision=parts.precision.name,
            bf16_native=bf16_supported(parts.device),
        )
        # NaN checks need the loss on the host: free on CPU, a sync on CUDA, so there the
        # check runs at log points only.
        # Under DDP the check runs at log points on the all-reduced loss, so that every rank
        # stops together instead of one rank leaving the others in a collective.
        self.check_every_step = parts.device.type == "cpu" and dist.world_size == 1
        self.batch_size = cfg.data.batch_size
        if cfg.train.profile_steps:
            self.profiler.request(cfg.train.profile_steps)
        self.memory.request(cfg.train.memory_snapshot_steps, sink)

    # ---------------------------------------------------------------- the step
    def train_step(self, batches: Any, need_grad_norm: bool) -> None:
        p, model, optimizer = self.parts, self.parts.train_model, self.parts.optimizer
        accum = self.cfg.optim.grad_accum
        progress = self.progress  # the rank watch reads how far this rank got (two stores)
        for micro in range(accum):
            progress.micro += 1
            progress.phase = "data"
            t0 = time.perf_counter()
            batch = next(batches)  # the time blocked here is the data wait
            self.meter.data_wait_s += time.perf_counter() - t0
            progress.phase = "forward"
            # the gradients synced over the ranks only on the micro-batch that steps
            with self.strategy.no_sync(micro < accum - 1):
                with p.precision.autocast(), self.timed_forward():
                    out = self.task.training_step(model, batch)
                loss, metrics = split_training_output(out, self.label)
                if self.check_every_step and not torch.isfinite(loss):
                    raise self.nonfinite_loss(loss)
                progress.phase = "backward"
                p.precision.scale(loss / accum).backward()
            tokens = int(self.task.tokens(batch) or 0) if self.count_tokens else 0
            self.meter.add_micro(loss, batch_size_of(self.task, batch, self.label), metrics, tokens)
        progress.phase = "update"
        if need_grad_norm or self.cfg.optim.grad_clip > 0:
            p.precision.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            max_norm = self.cfg.optim.grad_clip or math.inf
            # sharded (FSDP) gradients: the strategy gives the whole model's norm
            self.meter.grad_norm = self.strategy.clip_grad_norm_(p.model.parameters(), max_norm)
        scale_before = self.meter.note_scale_before_step()
        p.precision.step(optimizer)  # fp16: skipped on inf/NaN grads, then scale update
        self.meter.note_scale_after_step(scale_before)
        optimizer.zero_grad(set_to_none=True)
        self.lr = float(p.scheduler.get_last_lr()[0])  # the rate this step used
        p.scheduler.step()
        self.meter.steps += 1
        self.meter.interval_steps += 1

    def nonfinite_loss(self, loss: torch.Tensor) -> TrainingError:
        return TrainingError(
            f"the loss is {loss.item()} at step {self.step + 1}; stopped before the optimizer step",
            hint="lower optim.lr, set optim.grad_clip (e.g. 1.0), or use --precision bf16/fp32",
            step=self.step + 1,
        )

    # ---------------------------------------------------------------- the loop
    def fit(self) -> str:
        """Train until max_steps, the last epoch or a stop request; returns the end status."""
        p = self.parts
        self.control.state = "compiling" if p.compiled else "running"
        if p.compiled:
            self.sink.write(
                event_record("compiling the model with torch.compile (first step)", kind="compile")
            )
        self.start_step = self.step  # the first step of this process compiles
        self.fitting = True
        self.quiet_from_now()
        status = "completed"
        while self.epoch < self.cfg.train.epochs and self.step < p.total_steps:
            status = self.run_epoch()
            if status != "completed":
                break
        with self.own_work("memory snapshot"):
            self.memory.close(self.step, self.sink)  # a recording the run's end cut short
        if status == "completed" or self.cfg.checkpoint.on_stop:
            self.save("stop" if status == "stopped" else "end of training")
        return status

    def run_epoch(self) -> str:
        p = self.parts
        start = self.epoch_step * self.cfg.optim.grad_accum  # a resumed run skips what it did
        batches = iter(p.data.train.batches(self.epoch, start=start))
        for _ in range(self.epoch_step, p.steps_per_epoch):
            self.poll_commands()
            if self.pause_wanted and not self.stop_wanted:
                self.pause()
                self.quiet_from_now()
            if self.stop_wanted:
                return "stopped"
            if self.step >= p.total_steps:
                break
            self.one_step(batches)
        if self.epoch_step < p.steps_per_epoch:  # max_steps ended the run mid-epoch
            self.evaluate()  # a run never ends without its final validation numbers
            return "completed"
        self.epoch += 1
        self.epoch_step = 0
        if self.cfg.train.eval_every_epoch or self.step >= p.total_steps:
            self.evaluate()
        if self.cfg.checkpoint.at_epoch_end:
            self.save("epoch end")
        self.quiet_from_now()
        return "completed"

    def one_step(self, batches: Any) -> None:
        p = self.parts
        log_every = self.cfg.train.log_every
        is_log = (self.step + 1) % log_every == 0 or self.step + 1 == p.total_steps
        first = self.step == self.start_step and p.compiled
        progress = self.progress  # the work the rank watch excuses (OWN_WORK), each in turn
        progress.work = "profile"
        self.profiler.maybe_start(None, self.step)
        progress.work = "memory snapshot"
        self.memory.maybe_start(self.step)
        progress.work = "compile" if first else ""
        self.state_sound = False
        self.train_step(batches, need_grad_norm=is_log)
        self.step += 1
        self.control.step = self.step
        self.epoch_step += 1
        self.state_sound = True
        self.samples += self.batch_size * self.cfg.optim.grad_accum * self.dist.world_size
        progress.work = "profile"  # a profile's trace, a memory snapshot: a file
        self.profiler.after_step(self.sink)
        progress.work = "memory snapshot"
        self.memory.after_step(self.step, self.sink)
        progress.work = ""
        if self.cfg.train.pace_s:
            self.control.sleep(self.cfg.train.pace_s)  # a stop (SIGTERM, q) does not wait it out
        if first:
            self.compile_done()
        elif is_log:
            self.log_point()
        else:
            self.maybe_progress()
        eval_every = self.cfg.train.eval_every
        # an epoch's end evaluates anyway, and so does the run's last step
        mid_epoch = self.epoch_step < p.steps_per_epoch and self.step < p.total_steps
        if eval_every and self.step % eval_every == 0 and mid_epoch:
            self.evaluate()
            self.quiet_from_now()
        every = self.cfg.checkpoint.every_steps
        if every and self.step % every == 0:
            self.save(f"every {every} steps")
            self.quiet_from_now()
        if self.checkpoint_wanted:
            self.checkpoint_wanted = False
            self.save("requested")
            self.quiet_from_now()

    def maybe_progress(self) -> None:
        """A long log interval (a slow first step, a big `log_every`) is not a hang: after
        PROGRESS_EVERY_S without a record, a `progress` event with the steps done and the
        wall seconds a step since the last record (host time, no device sync: on a GPU the
        launch rate, close to the step rate once the queue is full)."""
        now = time.monotonic()
        when, step = self._said_at
        if now - when < PROGRESS_EVERY_S or self.step <= step:
            return
        per_step = (now - when) / (self.step - step)
        total = self.parts.total_steps
        logged = self._logged_step
        last = "no log point yet" if logged is None else f"last log point at step {logged}"
        self.sink.write(
            event_record(
                f"step {self.step}/{total}, {per_step:.3g} s a step ({last})",
                kind="progress",
                step=self.step,
                step_time_s=round(per_step, 4),
            )
        )
        self.quiet_from_now()

    def compile_done(self) -> None:
        synchronize(self.parts.device)  # sync point: the compile time is measured to here
        self.meter.note_sync()
        seconds = time.perf_counter() - self.meter._t0
        self.sink.write(
            event_record(
                f"torch.compile done in {seconds:.1f} s (first step, not counted in throughput)",
                kind="compile_done",
                seconds=round(seconds, 2),
            )
        )
        self.control.state = "running"
        self.quiet_from_now()
        self.meter.restart_clock()

    def log_point(self) -> None:
        record = self.meter.record(self.step, self.fractional_epoch(), self.samples, self.lr)
        built = time.perf_counter()  # from here on: the monitor's cost, in the next record
        # merged over the ranks: every rank gets the same mean loss, so the same verdict
        if self.strategy.gather_metrics(record, self.parts.train_metrics):
            self.meter.note_sync()  # the merge's result read on the host
        if record["loss"] is None or not math.isfinite(record["loss"]):
            self.diagnostics.alert_nonfinite(self.step)
            raise TrainingError(
                f"the loss became NaN or Inf before step {self.step}",
                hint="lower optim.lr, set optim.grad_clip (e.g. 1.0), or use --precision bf16/fp32",
                step=self.step,
            )
        nonfinite = []
        for name in self.parts.train_metrics:  # a task's NaN metric: null, and an alert
            if not math.isfinite(record[name]):
                nonfinite.append(name)
                record[name] = None
        self.sink.write(record)
        self._logged_step = self.step
        self.quiet_from_now()
        self.throughputs.append(record["samples_per_s"])
        self.diagnostics.check(record, self.step, nonfinite=nonfinite)
        self.meter.add_monitor_time(time.perf_counter() - built)

    def fractional_epoch(self) -> float:
        return self.step / self.parts.steps_per_epoch

    def poll_commands(self, force: bool = False) -> None:
        """Read the control object. Alone: every step. Under DDP: an all-reduce right after
        each log point (the same step on every rank), so all ranks act together. A memory
        snapshot is rank 0's alone (no collective): its request is read every step."""
        self.memory.request(self.control.take_memory_snapshot_request(), self.sink)
        if self.dist.world_size == 1:
            self.stop_wanted = self.control.stop_requested
            self.pause_wanted = self.control.paused
            self.checkpoint_wanted |= self.control.take_checkpoint_request()
            self.profiler.request(self.control.take_profile_request())
            return
        if not force and self.step % self.cfg.train.log_every != 0:
            return
        from tuitrain.engine.distributed import agree_commands

        agreed = agree_commands(self.control, self.dist, self.parts.device)
        self.stop_wanted = bool(agreed["stop"])
        self.pause_wanted = bool(agreed["pause"])
        self.checkpoint_wanted |= bool(agreed["checkpoint"])
        self.profiler.request(agreed["profile"])

    def quiet_from_now(self) -> None:
        """The progress clock starts again (after a record, a pause, an evaluation, a save)."""
        self._said_at = (time.monotonic(), self.step)

    def pause(self) -> None:
        """Wait, polling (a heartbeat collective under DDP), until resumed or stopped; a
        checkpoint asked for meanwhile is saved at once."""
        self.control.state = "paused"
        self.sink.write(event_record(f"paused at step {self.step}", kind="pause", step=self.step))
        while self.pause_wanted and not self.stop_wanted:
            time.sleep(0.1)
            self.poll_commands(force=True)
            if self.checkpoint_wanted:
                self.checkpoint_wanted = False
                self.save("requested")
        self.control.state = "running"
        if not self.stop_wanted:
            resumed = event_record(f"resumed at step {self.step}", kind="resume", step=self.step)
            self.sink.write(resumed)
        self.meter.restart_clock()  # paused time is not training time

    def save_rank_state(self) -> None:
        from tuitrain.engine.checkpoint import save_rank_state

        assert self.files is not None
        try:
            save_rank_state(
                self.files.path, self.step, self.dist.rank, self.rank_state_dict(),
                self.cfg.checkpoint.keep,
            )  # fmt: skip
        except OSError as exc:
            self.sink.write(
                event_record(
                    f"rank {self.dist.rank}'s state at step {self.step} was not saved "
                    f"({exc.strerror or exc}); a resume from it is not bit-exact on this rank",
                    level="error",
                    kind="checkpoint_failed",
                )
            )
            return
        self.last_saved_step = self.step

    # ---------------------------------------------------------------- evaluation
    def evaluate(self) -> None:
        """The task's validation metrics under inference_mode, averaged over the validation
        set weighted by batch size; one sync at the end. The plain module runs it: the
        compiled one would compile an eval graph unseen (a long stall). Every rank runs its
        own, at its own pace: the rank watch knows (a slower one is not a stalled rank)."""
        with self.own_work("eval"):
            self._evaluate()

    def _evaluate(self) -> None:
        p = self.parts
        self.control.state = "evaluating"
        p.model.eval()
        sums: dict[str, torch.Tensor] = {}
        count = 0
        items: list[torch.Tensor] = []
        primary = self.primary[len("val_") :] if self.primary else None
        with torch.inference_mode(), p.precision.autocast():
            for batch in p.data.val.batches(0):
                n = batch_size_of(self.task, batch, self.label)
                out = self.task.validation_step(p.model, batch)
                if out is not None:
                    values = validation_values(out, n, self.label)
                else:  # no validation_step: the training loss on the validation set
                    loss, _ = split_training_output(
                        self.task.training_step(p.model, batch), self.label
                    )
                    values = {"loss": (loss.detach().float() * n, None)}
                for name, (total, per_item) in values.items():
                    sums[name] = sums[name] + total if name in sums else total
                    if name == primary and per_item is not None:
                        items.append(per_item)
                count += n
            # per item, on the device (no sync): the parity check pairs two runs' items with
            # it. The val set is never sharded: every rank evaluates all of it, in order.
            if items and len(items) == len(p.data.val):
                joined = torch.cat(items)
                classify = self.primary == CLASSIFY_PRIMARY  # accuracy: each item right or not
                self.val_correct = joined.bool() if classify else joined
            else:
                self.val_correct = None
        p.model.train()
        names = list(sums)
        # the sums on the host (float32 on the device, as the loss sum always was), divided
        # there in double precision
        totals = torch.stack([sums[n].float() for n in names]).tolist() if names else []
        means = [total / max(count, 1) for total in totals]
        self.meter.note_sync()  # sync point: once per evaluation
        # val_<name> per metric, a non-finite one null (and the nonfinite_metric alert)
        record = eval_record(
            self.step, dict(zip(names, means, strict=True)), self.fractional_epoch()
        )
        nonfinite = [eval_key(n) for n, v in zip(names, means, strict=True) if not math.isfinite(v)]
        self.val_metrics = {k: v for k, v in record.items() if k.startswith("val_")}
        self.val_loss = self.val_metrics.get("val_loss")
        self.sink.write(record)
        if nonfinite:
            self.diagnostics.alert_nonfinite_metrics(nonfinite, self.step)
        self.judge_progress()
        self.judge_chance()
        self.write_sample()
        self.control.state = "running"
        self.meter.restart_clock()  # evaluation time is not training throughput

    def judge_progress(self) -> None:
        """The primary metric's best so far; three evaluations without a better one is
        advice (once per run), not an alert: a plateau may be the end of training."""
        value = self.val_metrics.get(self.primary) if self.primary else None
        if value is None:
            return
        better = self.best is None or (
            value < self.best if self.mode == "min" else value > self.best
        )
        if better:
            self.best, self.evals_since_best = value, 0
            return
        self.evals_since_best += 1
        if self.evals_since_best >= PLATEAU_EVALS and not self.plateau_advised:
            self.plateau_advised = True
            self.sink.write(
                event_record(
                    f"{self.primary} has not improved for {self.evals_since_best} evaluations"
                    f" (best {self.best:.4g}, now {value:.4g}): the run may have converged or"
                    " be overfitting; stop it, or lower optim.lr",
                    level="info",
                    kind="advice",
                    metric=self.primary,
                    best=self.best,
                )
            )

    def judge_chance(self) -> None:
        """The divergence alert's second half: after an epoch, the primary metric no better
        than chance (a task that declares its chance level: classify, 1/K accuracy)."""
        chance = self.task.chance
        name = self.primary[len("val_") :] if self.primary else None
        value = self.val_metrics.get(self.primary) if self.primary else None
        level = chance.get(name) if name else None
        if self.at_chance_said or self.epoch < 1 or value is None or level is None:
            return
        margin = 1.1 * level if self.mode == "max" else 0.9 * level
        if (value > margin) if self.mode == "max" else (value < margin):
            return
        rules = self.diagnostics.rules
        if rules.action("divergence") == "off":
            return
        self.at_chance_said = True
        from tuitrain.metrics.alerts import Alert

        self.diagnostics.raise_alert(
            Alert(
                "divergence",
                rules.action("divergence"),
                f"{self.primary} is {value:.4g} after {self.epoch} epoch(s), at chance"
                f" ({level:.4g}): the model learned nothing; lower optim.lr or check the"
                " labels",
                {"metric": self.primary, "value": value, "chance": level},
            ),
            self.step,
        )

    def write_sample(self) -> None:
        """The task's sample (charlm: text from a fixed prompt) as an event, rank 0 only.
        Where the forward is a collective (FSDP) every rank runs it (a seeded generator of
        its own: no rank's RNG moves) and rank 0 alone writes it."""
        if not self.dist.is_main and not self.strategy.collective_forward:
            return
        p = self.parts
        p.model.eval()
        try:
            with torch.inference_mode(), p.precision.autocast():
                text = self.task.sample(p.model, p.device)
        finally:
            p.model.train()
        if isinstance(text, str) and text and self.dist.is_main:
            self.sink.write(
                event_record(f"sample at step {self.step}: {text!r}", kind="sample", text=text)
            )

    # ---------------------------------------------------------------- checkpoints
    def save(self, reason: str) -> Path | None:
        """Save a checkpoint (rank 0, with a run dir); a failed write never ends the run.
        Under DDP the other ranks save their own RNG and loss window beside it (same step:
        every rank reaches the same save points); a sharded checkpoint has every rank write
        its shard and its own state into the folder rank 0 renames into place."""
        if self.files is None or self.last_saved_step == self.step:
            return None
        with self.own_work("save"):
            return self._save(reason)

    @contextlib.contextmanager
    def own_work(self, work: str) -> Iterator[None]:
        """Long work this rank does while the others may wait for it in a collective (one of
        rankwatch.OWN_WORK: an evaluation, a compile, a checkpoint, a profile's trace), set
        before it starts and cleared after: the rank watch does not call a long one a stall."""
        before, self.progress.work = self.progress.work, work
        try:
            yield
        finally:
            self.progress.work = before

    def _save(self, reason: str) -> Path | None:
        self.meter.note_sync()  # the state is copied to the host
        if not self.dist.is_main and self.sharded_checkpoints:  # every rank writes its shard
            with contextlib.suppress(OSError):  # rank 0 says the save failed
                self.write_checkpoint()
                self.last_saved_step = self.step
            return None
        if not self.dist.is_main:
            if self.strategy.collective_state:  # the gather to rank 0: every rank joins it
                self.strategy.model_state_dict()
                self.strategy.optimizer_state_dict(self.parts.optimizer)
            self.save_rank_state()
            return None
        with self.control.critical():  # a second Ctrl-C waits for the file and its event
            return self.save_main(reason)

    def save_main(self, reason: str) -> Path | None:
        from tuitrain.engine.checkpoint import list_checkpoints

        assert self.files is not None
        try:
            path = self.write_checkpoint()
        except OSError as exc:
            self.checkpoint_failure = str(exc.strerror or exc)
            kept = list_checkpoints(self.files.checkpoints)
            said = (
                f"the earlier checkpoints are intact (newest: {kept[0].name})"
                if kept
                else "no checkpoint of this run is kept"
            )
            self.sink.write(
                event_record(
                    f"checkpoint at step {self.step} failed ({self.checkpoint_failure}); {said}",
                    level="error",
                    kind="checkpoint_failed",
                )
            )
            return None
        self.last_saved_step = self.step
        self.sink.write(
            event_record(
                f"checkpoint saved at step {self.step} ({reason}): {path}",
                kind="checkpoint",
                path=str(path),
                step=self.step,
            )
        )
        self.meter.restart_clock()  # the save is not training time
        return path

    @property
    def sharded_checkpoints(self) -> bool:
        return self.strategy.sharded_checkpoints(self.cfg.checkpoint.format)

    def write_checkpoint(self) -> Path:
        """Rank 0's whole checkpoint file, or (sharded) every rank's part of the folder."""
        from tuitrain.engine.checkpoint import save_checkpoint, save_sharded

        assert self.files is not None
        keep = self.cfg.checkpoint.keep
        if not self.sharded_checkpoints:
            return save_checkpoint(self.files.path, self.state_dict(), keep)
        shards, groups = self.strategy.sharded_state(self.parts.optimizer)
        own = (
            {**self.state_dict(weights=False), "param_groups": groups}
            if self.dist.is_main
            else self.rank_state_dict()
        )
        return save_sharded(
            self.files.path, self.step, self.dist.rank, shards, own, keep, self.strategy.agree,
            self.dist.world_size,
        )  # fmt: skip

    # ---------------------------------------------------------------- state
    def state_dict(self, weights: bool = True) -> dict[str, Any]:
        """Everything a checkpoint holds (engine/state.py says what and why): the model under
        plain names (the strategy's), optimizer, scheduler, GradScaler, every RNG, the
        position and the open log interval, and what the evaluations so far decided. Not
        `weights`: all but the model and optimizer (a sharded checkpoint's state.pt)."""
        p = self.parts
        scaler = p.precision.scaler
        state = {
            "format": FORMAT_VERSION,
            "preset": self.cfg.name,
            "config": self.cfg.to_dict(),
            "versions": {
                "torch": str(torch.__version__),
                "tuitrain": tuitrain.__version__,
                "python": platform.python_version(),
            },
            "world_size": self.dist.world_size,
            "global_batch": self.cfg.data.batch_size
            * self.cfg.optim.grad_accum
            * self.dist.world_size,
            "steps_per_epoch": p.steps_per_epoch,
            "step": self.step,
            "epoch": self.epoch,
            "epoch_step": self.epoch_step,
            "samples": self.samples,
            "val_loss": self.val_loss,
            "val_metrics": dict(self.val_metrics),
            "best": self.best,  # the primary metric's best so far, and evaluations since
            "evals_since_best": self.evals_since_best,
            "scheduler": p.scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "rng": rng_state(),
            "meter": self.meter.state_dict(),
        }
        if weights:  # never the compiled/DDP wrapper's; under FSDP gathered to rank 0
            state["model"] = self.strategy.model_state_dict()
            state["optimizer"] = self.strategy.optimizer_state_dict(p.optimizer)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put this trainer back where `state` (a `state_dict()`, checked by
        `state.check_resumable`) was; refused when it does not fit the model."""
        p = self.parts
        check_compatible(state, p.model, self.cfg.name)
        self.strategy.load_model_state_dict(state["model"])
        self.strategy.load_optimizer_state_dict(p.optimizer, state["optimizer"])
        p.scheduler.load_state_dict(state["scheduler"])
        if p.precision.scaler is not None and state.get("scaler"):
            p.precision.scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
        self.step = int(state["step"])
        self.epoch = int(state["epoch"])
        self.epoch_step = int(state["epoch_step"])
        self.samples = int(state["samples"])
        self.val_loss = state.get("val_loss")
        metrics = state.get("val_metrics")
        if not isinstance(metrics, dict):  # an older checkpoint: its val_* numbers
            metrics = {k: v for k, v in state.items() if k.startswith("val_")}
        if isinstance(metrics, dict):
            self.val_metrics = {
                k: v for k, v in metrics.items() if isinstance(k, str) and is_number(v)
            }
        best: Any = state.get("best")
        self.best = float(best) if is_number(best) and math.isfinite(best) else None
        since = state.get("evals_since_best")
        self.evals_since_best = since if isinstance(since, int) and since >= 0 else 0
        self.meter.load_state_dict(state["meter"])
        self.last_saved_step = self.step

    def rank_state_dict(self) -> dict[str, Any]:
        """What a DDP rank other than 0 adds to rank 0's checkpoint: its own RNG (dropout
        masks) and its open loss window (its part of the next logged mean loss)."""
        return {"step": self.step, "rng": rng_state(), "meter": self.meter.state_dict()}

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        set_rng_state(state["rng"])
        self.meter.load_state_dict(state["meter"])
