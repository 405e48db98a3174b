"""Build the pieces of a run from a typed config: device, data, model, optimizer, schedule."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import numpy as np
import torch
from torch import nn

from tuitrain.core.config import Config, OptimConfig
from tuitrain.core.errors import UserError
from tuitrain.engine.data.build import build_data
from tuitrain.engine.data.sources import DataBundle, first_items
from tuitrain.engine.device import device_name, resolve_device, tf32_active
from tuitrain.engine.distributed import DistInfo
from tuitrain.engine.factory import blame_user
from tuitrain.engine.flops import (
    Peak,
    count_flops,
    left_as_it_was,
    measure_peak,
    peak_dtype,
    per_sample,
    table_peak,
)
from tuitrain.engine.hostmem import set_host_malloc
from tuitrain.engine.models.build import build_model
from tuitrain.engine.precision import Precision, make_precision
from tuitrain.engine.strategy import Strategy, make_strategy, sharded_gradients
from tuitrain.engine.tasks.base import (
    Task,
    batch_size_of,
    declarations,
    split_training_output,
    validation_values,
)
from tuitrain.engine.tasks.build import build_task, task_label


@dataclass(slots=True)
class RunParts:
    """Everything the loop needs. `model` is the plain module (kept for saving and eval);
    `train_model` is what the loop calls (compiled and/or wrapped by the strategy)."""

    device: torch.device
    precision: Precision
    data: DataBundle
    model: nn.Module
    train_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    compiled: bool
    steps_per_epoch: int
    total_steps: int
    task: Task  # what is trained: the loss and the metrics (engine/tasks/base.py)
    strategy: Strategy  # how the model is spread over the ranks (engine/strategy.py)
    # the header's task declaration: primary metric, mode, every metric's goal and format
    task_info: dict[str, Any] = field(default_factory=dict)
    train_metrics: tuple[str, ...] = ()  # the task's own train metrics, in record order
    flops_per_sample: float | None = None  # forward + backward, counted once (engine/flops.py)
    peak: Peak = Peak(None, "not looked up")  # what MFU divides by
    host_malloc: str = "system"  # the host allocator in effect (engine/hostmem.py)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class OptimizerKernels(TypedDict, total=False):
    """The keyword arguments `optimizer_kernels` adds to SGD/AdamW: one of the two."""

    fused: bool
    foreach: bool


def optimizer_kernels(device_type: str) -> OptimizerKernels:
    """How the optimizer update runs on this device type: `fused` on CUDA, `foreach` elsewhere.

    fused is one kernel per step, and a fused optimizer takes the GradScaler's `found_inf` as
    a device tensor: with foreach, `GradScaler.step` reads `found_inf` with `.item()` (a host
    sync on every fp16 step) before deciding whether to call `optimizer.step()`. Elsewhere
    foreach: a few multi-tensor kernels, and no device to sync with.
    """
    return {"fused": True} if device_type == "cuda" else {"foreach": True}


def make_optimizer(params: list[nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    kernels = optimizer_kernels(params[0].device.type)
    optimizer: torch.optim.Optimizer
    if cfg.name == "sgd":
        optimizer = torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **kernels
        )
    else:
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **kernels)
    optimizer.register_load_state_dict_pre_hook(keep_kernels(kernels))
    return optimizer


def keep_kernels(
    kernels: OptimizerKernels,
) -> Callable[[torch.optim.Optimizer, dict[str, Any]], dict[str, Any]]:
    """A load_state_dict pre-hook: keep this run's fused/foreach choice over the checkpoint's.

    `load_state_dict` takes the saved groups' flags, so a checkpoint from a CPU (foreach) run
    resumed on CUDA would step a fused-built optimizer down the foreach path, which fails
    when the GradScaler hands it `found_inf`; the flags also decide where `step` is loaded
    (on the parameters' device for fused).
    """

    def hook(_optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        groups = [
            {**g, "fused": kernels.get("fused"), "foreach": kernels.get("foreach")}
            for g in state["param_groups"]
        ]
        return {**state, "param_groups": groups}

    return hook


def make_schedule(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup, then cosine or linear decay from lr to lr * min_lr_ratio (or constant)."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg.schedule == "constant":
            return 1.0
        progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
        if cfg.schedule == "linear":
            decay = 1.0 - progress
        else:
            decay = 0.5 * (1.0 + math.cos(math.pi * progress))
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def want_compile(cfg: Config, device: torch.device) -> bool:
    mode = cfg.train.compile
    return mode == "on" or (mode == "auto" and device.type == "cuda")


def build_parts(cfg: Config, dist: DistInfo) -> RunParts:
    host_malloc = set_host_malloc(cfg.train.host_malloc)  # before the run allocates
    device = resolve_device(cfg.train.device, dist.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # TF32: fp32 matmuls/convs on tensor cores (Ampere+), ~10 bits of mantissa.
        torch.backends.cuda.matmul.allow_tf32 = cfg.train.tf32
        torch.backends.cudnn.allow_tf32 = cfg.train.tf32
        torch.backends.cudnn.benchmark = True
    fsdp = sharded_gradients(cfg.distributed.strategy, dist.world_size)
    precision = make_precision(cfg.train.precision, device, sharded=fsdp)
    seed_everything(cfg.train.seed)
    data = build_data(
        cfg.data, device, cfg.train.seed, dist.rank, dist.world_size, cfg.model.channels_last,
        classify=cfg.task.name == "classify",
    )  # fmt: skip
    check_grad_accum(cfg, len(data.train))
    task = build_task(cfg, task_offers(cfg, data))
    model = build_model(
        cfg.model.name, data.num_classes, cfg.model.dropout, data.input_shape, cfg.model
    )
    model = model.to(device)
    if cfg.model.channels_last:
        model = model.to(memory_format=torch.channels_last)
    train_metrics, val_metrics, flops = dry_step(task, model, cfg, data, device, precision)
    strategy = make_strategy(dist, device, cfg.distributed.strategy, precision.name)
    train_model = wrap_model(model, cfg, device, strategy)
    optimizer = make_optimizer(list(model.parameters()), cfg.optim)
    steps_per_epoch = max(len(data.train) // cfg.optim.grad_accum, 1)
    total = steps_per_epoch * cfg.train.epochs
    if cfg.train.max_steps:
        total = min(total, cfg.train.max_steps)
    return RunParts(
        device=device,
        precision=precision,
        data=data,
        model=model,
        train_model=train_model,
        optimizer=optimizer,
        scheduler=make_schedule(optimizer, cfg.optim, total),
        compiled=want_compile(cfg, device),
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        task=task,
        task_info={
            **declarations(task, list(train_metrics), val_metrics, cfg.task.name),
            "tokens": task.counts_tokens,
        },
        train_metrics=train_metrics,
        strategy=strategy,
        flops_per_sample=flops,
        peak=run_peak(cfg, device, precision.name),
        host_malloc=host_malloc,
    )


def run_peak(cfg: Config, device: torch.device, precision: str) -> Peak:
    """The datasheet's peak for this device and dtype, or the matmul probe's (measure_peak)."""
    dtype = peak_dtype(precision, tf32_active(device))
    if cfg.train.measure_peak:
        return measure_peak(device, dtype)
    return table_peak(device, device_name(device), dtype)


def check_grad_accum(cfg: Config, train_batches: int) -> None:
    """A step takes grad_accum batches: an epoch with fewer would end before its first step."""
    accum = cfg.optim.grad_accum
    if train_batches < accum:
        raise UserError(
            f"optim.grad_accum = {accum} needs {accum} batches per epoch, but the train split"
            f" gives {train_batches} on this rank (data.batch_size = {cfg.data.batch_size}):"
            " lower optim.grad_accum or data.batch_size, or train on more samples."
        )


def dry_forward(
    model: nn.Module, cfg: Config, data: DataBundle, device: torch.device, precision: Precision
) -> None:
    """Run the model once on one zero input of the data's shape, in eval mode without
    gradients, and check it gives (1, num_classes) logits: a model that does not fit the
    data fails here in one sentence, not in the first step (or the first evaluation).

    Eval mode draws no random numbers (dropout is off) and leaves batch-norm statistics
    alone; the RNG states are put back anyway, for models that draw in eval mode."""
    shape = (1, *data.input_shape)
    x = torch.zeros(shape, device=device)
    if cfg.model.channels_last and x.ndim == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    name, wanted = cfg.model.name, (1, data.num_classes)
    cuda = [device] if device.type == "cuda" else []
    try:
        with (
            blame_user(
                lambda error: (
                    f"model.name = {name!r} fails on an input of the data's shape "
                    f"{shape} ({error}); make the model fit the data or the data the model."
                )
            ),
            torch.random.fork_rng(devices=cuda),
            torch.no_grad(),
            precision.autocast(),
        ):
            model.eval()
            out = model(x)
    finally:
        model.train()
    if not isinstance(out, torch.Tensor):
        raise UserError(
            f"model.name = {name!r} returns a {type(out).__name__} for an input of shape"
            f" {shape}; it must return a Tensor of logits of shape {wanted}."
        )
    if tuple(out.shape) != wanted or not out.is_floating_point():
        got = f"{tuple(out.shape)}" + ("" if out.is_floating_point() else f" {out.dtype}")
        raise UserError(
            f"model.name = {name!r} returns logits of shape {got} for an input of shape"
            f" {shape}; it must return float logits of shape {wanted}, one per class"
            f" (data.num_classes = {data.num_classes})."
        )


def task_offers(cfg: Config, data: DataBundle) -> dict[str, Any]:
    """The keyword arguments a task factory may take (it gets those it accepts)."""
    return {
        "num_classes": data.num_classes,
        "label_smoothing": cfg.train.label_smoothing,
        "seed": cfg.train.seed,
        "vocabulary": data.vocabulary,
    }


DRY_ITEMS = 2  # items of the first validation batch the dry step runs


def dry_step(
    task: Task,
    model: nn.Module,
    cfg: Config,
    data: DataBundle,
    device: torch.device,
    precision: Precision,
) -> tuple[tuple[str, ...], list[str], float | None]:
    """The task's training_step and validation_step once on the first DRY_ITEMS items of the
    first validation batch, in
    eval mode (no dropout draws, batch-norm statistics untouched) with the RNGs, gradients
    and buffers put back: a task, model or batch that do not fit fail here in one sentence,
    before the header; what they return names the run's metrics. The training step runs
    under FlopCounterMode (with its backward): the FLOPs per sample that MFU divides. A task
    whose model gives class logits (`task.logits`) has the model checked on one zero input
    first (`dry_forward`). The same for every task. Returns (train metric names, val metric
    names, FLOPs per sample or None)."""
    if task.logits:
        dry_forward(model, cfg, data, device, precision)
    label = task_label(cfg)
    batch = next(iter(data.val.batches(0)), None)
    if batch is None:
        raise UserError(f"{label}: the validation split gives no batch; give it some samples.")
    # a few items are enough to check the fit and count FLOPs per sample: a full validation
    # batch with its backward costs seconds at start and device memory training never needs
    batch = first_items(batch, batch_size_of(task, batch, label), DRY_ITEMS)
    n = batch_size_of(task, batch, label)

    def train_and_backward() -> dict[str, torch.Tensor]:
        with precision.autocast():
            out = task.training_step(model, batch)
        loss, metrics = split_training_output(out, label)
        if loss.requires_grad:
            loss.backward()
        return metrics

    with left_as_it_was(model, device):
        with blame_user(
            lambda error: (
                f"{label}: training_step on the first validation batch raised {error};"
                " make the task, the model and the data fit each other."
            )
        ):
            metrics, total = count_flops(train_and_backward)
        with (
            blame_user(
                lambda error: f"{label}: validation_step on the first batch raised {error}."
            ),
            torch.inference_mode(),
            precision.autocast(),
        ):
            out = task.validation_step(model, batch)
            val_metrics = ["loss"] if out is None else list(validation_values(out, n, label))
    if task.primary not in val_metrics:
        raise UserError(
            f"{label}: its primary metric {task.primary!r:.40} is not among the validation"
            f" metrics ({', '.join(val_metrics)}); set the task's primary to one of them."
        )
    return tuple(metrics), val_metrics, per_sample(total, n)


def wrap_model(
    model: nn.Module, cfg: Config, device: torch.device, strategy: Strategy
) -> nn.Module:
    """The strategy wraps the module already on its device (DDP); compile goes over the
    wrapper (the order PyTorch documents, so DDPOptimizer splits graphs at bucket
    boundaries)."""
    wrapped = strategy.wrap(model)
    if want_compile(cfg, device):
        # compiling a Module returns an OptimizedModule (an nn.Module); the stubs say Callable
        wrapped = cast(nn.Module, torch.compile(wrapped, mode=cfg.train.compile_mode))
    return wrapped
