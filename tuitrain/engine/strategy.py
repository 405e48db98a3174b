"""How the model is spread over the ranks: one class per way (a single process, DDP).

A strategy wraps the plain module for training, says how a micro-batch that does not step
skips the gradient all-reduce (accumulation), produces and loads the model's state dict
under plain names (a checkpoint never holds `module.` or `_orig_mod.` prefixes, so it loads
into any strategy), and merges each log point's train record over the ranks. The trainer and
the checkpoint code ask the strategy; they never look at the wrapper. FSDP2 (`FSDPStrategy`)
shards the model and writes sharded checkpoints (or gathers a whole one);
`distributed.strategy` chooses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from tuitrain.engine.comm import CommClock
from tuitrain.engine.distributed import DistInfo, gather_metrics


class Strategy:
    """The seam, with a single process's answers as defaults: the model as it is, no
    gradient sync, the record as measured."""

    # gathering the state is a collective (every rank joins a checkpoint's save)
    collective_state = False
    # the model's forward is a collective (every rank runs what rank 0 runs alone: the sample)
    collective_forward = False

    def __init__(self, dist: DistInfo, device: torch.device) -> None:
        self.dist, self.device = dist, device
        self.module: nn.Module | None = None  # the plain module, once wrapped
        self.comm_clock: CommClock | None = None  # DDP, FSDP: time in collectives

    def wrap(self, model: nn.Module) -> nn.Module:
        """What the step calls (torch.compile goes over it); `model` stays the plain one."""
        self.module = model
        return model

    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        """Around a micro-batch's backward: `skip` (the micro-batch does not step) keeps its
        gradients local, summed into the next; nothing to skip here."""
        return contextlib.nullcontext()

    def clip_grad_norm_(self, params: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
        """Clip the gradients to `max_norm` (inf: measure only); the total norm, a device
        tensor (read on the host at log points only)."""
        return nn.utils.clip_grad_norm_(params, max_norm)

    def model_state_dict(self, everywhere: bool = False) -> dict[str, Any]:
        """The model's weights and buffers under the plain module's names, whole. Where the
        state is sharded, rank 0 alone gets it unless `everywhere`."""
        return self.plain().state_dict()

    def load_model_state_dict(self, state: Mapping[str, Any]) -> None:
        self.plain().load_state_dict(state)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state, whole, in its own format (parameters numbered)."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
    ) -> None:
        optimizer.load_state_dict(dict(state))

    def gather_metrics(self, record: dict[str, Any], metric_names: tuple[str, ...]) -> bool:
        """Merge a train record over the ranks, in place; True when that read the device
        (a host sync the meter counts). One process: the record is everyone's already."""
        return False

    def sharded_checkpoints(self, fmt: str) -> bool:
        """Whether this run's checkpoints are sharded (checkpoint.format: auto shards where
        the state is, under FSDP)."""
        return fmt == "sharded"

    def sharded_state(
        self, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """What a sharded checkpoint's shards hold on this rank: the model's and optimizer's
        tensors under parameter names (this rank's shards of them: DTensors under FSDP, whole
        tensors elsewhere, which DCP writes once), and the optimizer's param groups (rank 0
        saves them in state.pt: DCP would pickle them)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.plain(), optimizer)
        shards = {"model": model_sd, "optim": {"state": optim_sd.get("state", {})}}
        groups: Any = optim_sd.get("param_groups", [])
        return shards, list(groups)

    def agree(self, ok: bool) -> bool:
        """True when `ok` on every rank (a collective with more than one)."""
        if self.dist.world_size == 1:
            return ok
        import torch.distributed as dist

        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def plain(self) -> nn.Module:
        if self.module is None:
            raise RuntimeError("the strategy has not wrapped a model yet")
        return self.module


class Single(Strategy):
    """One process, one device: the defaults."""


class DDPStrategy(Strategy):
    """DistributedDataParallel: the gradients all-reduced in buckets during backward, every
    rank holding the whole model; records merged with one all-gather per log point
    (engine/distributed.py, the merge rules of RANK_MERGE in metrics/records.py)."""

    def __init__(self, dist: DistInfo, device: torch.device) -> None:
        super().__init__(dist, device)
        self.ddp: nn.Module | None = None

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        self.module = model
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(model, device_ids=ids)
        self.comm_clock = CommClock(self.device)
        self.comm_clock.attach_ddp(self.ddp)  # the default all-reduce, its buckets timed
        return self.ddp

    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        # DDP: all-reduce the gradients only on the micro-batch that steps
        if skip and self.ddp is not None:
            return self.ddp.no_sync()  # type: ignore[operator,no-any-return]
        return contextlib.nullcontext()

    def gather_metrics(self, record: dict[str, Any], metric_names: tuple[str, ...]) -> bool:
        gather_metrics(record, self.dist, self.device, metric_names)
        return True  # the all-gather's result read on the host


def fsdp_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules `FSDPStrategy` shards one by one before the root (each its own all-gather
    and reduce-scatter, so only one block's full weights are live at a time). A model names
    them with a `fsdp_blocks()` method (the charlm GPT: its transformer blocks); else each
    direct child that holds parameters (a ModuleList's or ModuleDict's own children in its
    place: a list of layers is many units, not one)."""
    named = getattr(model, "fsdp_blocks", None)
    if callable(named):
        chosen = list(named())
        if not all(isinstance(b, nn.Module) for b in chosen):
            raise TypeError(f"{type(model).__name__}.fsdp_blocks() must return nn.Modules")
        return chosen
    blocks: list[nn.Module] = []
    for child in model.children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            blocks += [c for c in child.children() if any(True for _ in c.parameters())]
        elif any(True for _ in child.parameters()):
            blocks.append(child)
    return blocks


def fsdp_mixed_precision(precision: str) -> Any:
    """The MixedPrecisionPolicy for the run's precision: bf16 or fp16 gathers the weights in
    that dtype and reduces the gradients in fp32 (the sharded fp32 weights and optimizer
    state stay the masters); fp32 none (None). fp16's loss scaling is the precision's
    ShardedGradScaler (engine/precision.py), which agrees on inf/NaN over the shards."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def sharded_gradients(strategy: str, world_size: int) -> bool:
    """Whether each rank holds only a shard of the gradients (FSDP on more than one rank):
    fp16's GradScaler must then agree on inf/NaN over the ranks."""
    return strategy == "fsdp" and world_size > 1


class FSDPStrategy(Strategy):
    """FSDP2 (`fully_shard`): every block, then the root, sharded over a 1-D device mesh;
    each rank holds 1/world_size of the weights, gradients and optimizer state, gathers a
    block's weights for its forward and backward and reduce-scatters its gradients.

    Checkpoints are sharded by default (checkpoint.format = "auto": every rank writes its
    own shard through torch.distributed.checkpoint, engine/checkpoint.py); "whole" gathers
    the model and optimizer state to rank 0 (on the CPU) under the plain names and the
    optimizer's own numbering. Either loads into a single process, DDP, or FSDP on another
    world size. Gathering is a collective: every rank takes part (`collective_state`), and
    the model's forward is one too (`collective_forward`: every rank runs the sample, rank
    0 writes it)."""

    collective_state = True
    collective_forward = True

    def __init__(self, dist: DistInfo, device: torch.device, precision: str = "fp32") -> None:
        super().__init__(dist, device)
        self.precision = precision

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self.device.type, (self.dist.world_size,))
        policy = fsdp_mixed_precision(self.precision)
        kwargs: dict[str, Any] = {"mesh": mesh}
        if policy is not None:
            kwargs["mp_policy"] = policy
        blocks = fsdp_blocks(model)
        for block in blocks:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)  # the root: what no block holds (embeddings, head)
        clock = CommClock(self.device)
        try:  # its all-gathers and reduce-scatters (set_custom_* is not in every torch 2.x)
            clock.attach_fsdp([*blocks, model])
            self.comm_clock = clock
        except (ImportError, AttributeError):
            self.comm_clock = None  # an older torch: the records go without the comm fields
        self.module = model  # the same object, its class now an FSDPModule
        return model

    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        # FSDP2's no_sync: a micro-batch that does not step keeps its unsharded gradients
        # and reduce-scatters nothing; the one that steps reduces the sum. Its weights stay
        # gathered after its backward too, so the next micro-batch's forward gathers nothing
        # (the stepping one reshards them: memory as without accumulation between steps)
        self.plain().set_requires_gradient_sync(not skip)  # type: ignore[operator]
        self.plain().set_reshard_after_backward(not skip)  # type: ignore[operator]
        return contextlib.nullcontext()

    def clip_grad_norm_(self, params: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
        # the norm of sharded (DTensor) gradients is a DTensor: its full value on every rank
        norm = super().clip_grad_norm_(params, max_norm)
        full = getattr(norm, "full_tensor", None)
        return full() if callable(full) else norm

    def model_state_dict(self, everywhere: bool = False) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if everywhere:  # every rank gets the whole state (the final weights' digest)
            options = StateDictOptions(full_state_dict=True)
            full = get_model_state_dict(self.plain(), options=options)
            return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in full.items()}
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # rank 0's alone
        return get_model_state_dict(self.plain(), options=options)

    def load_model_state_dict(self, state: Mapping[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # every rank read the whole checkpoint: each keeps its own shard of it
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.plain(), dict(state), options=options)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        osd = get_optimizer_state_dict(self.plain(), optimizer, options=options)
        return numbered_optimizer_state(dict(osd)) if self.dist.is_main else {}

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        named = named_optimizer_state(self.plain(), optimizer, state)
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(self.plain(), optimizer, named, options=options)

    def gather_metrics(self, record: dict[str, Any], metric_names: tuple[str, ...]) -> bool:
        gather_metrics(record, self.dist, self.device, metric_names)
        return True

    def sharded_checkpoints(self, fmt: str) -> bool:
        return fmt != "whole"


def numbered_optimizer_state(osd: dict[str, Any]) -> dict[str, Any]:
    """torch.distributed.checkpoint's optimizer state (keyed by parameter names) in the
    optimizer's own format (parameters numbered in group order), as a plain
    `optimizer.state_dict()` gives it: the checkpoint loads into any strategy."""
    if not osd:
        return osd
    groups = osd["param_groups"]
    order = {name: i for i, name in enumerate(n for g in groups for n in g["params"])}
    return {
        "state": {order[name]: value for name, value in osd["state"].items()},
        "param_groups": [{**g, "params": [order[n] for n in g["params"]]} for g in groups],
    }


def named_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
) -> dict[str, Any]:
    """The reverse of `numbered_optimizer_state`: a plain optimizer state dict keyed by the
    model's parameter names, in this optimizer's group order."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    names = [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]
    return {
        "state": {names[int(i)]: value for i, value in state["state"].items()},
        "param_groups": [
            {**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]
        ],
    }


def make_strategy(
    dist: DistInfo, device: torch.device, kind: str = "ddp", precision: str = "fp32"
) -> Strategy:
    """With more than one rank, `kind` (distributed.strategy: ddp or fsdp); one process:
    the single process whatever `kind` says (nothing to shard over)."""
    if dist.world_size == 1:
        return Single(dist, device)
    if kind == "fsdp":
        return FSDPStrategy(dist, device, precision)
    return DDPStrategy(dist, device)
