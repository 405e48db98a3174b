"""Time in collectives per optimizer step: how much of a DDP or FSDP step is communication.

A rank's step time says nothing about why it is long. The clock times each collective from
its launch to its completion and sums, per log interval, the union of those spans (buckets
and layers run concurrently: a second counted twice would overstate the share). Under DDP
it also says how much of that union the step waited for: the part after the backward's
compute ended (the call of the iteration's last bucket, `GradBucket.is_last()`). Before
that the all-reduces ran behind the backward, hidden; after it, the optimizer step waits.

- DDP: a comm hook (`register_comm_hook`) that calls the default all-reduce
  (`default_hooks.allreduce_hook`, the same arithmetic as no hook) and marks each bucket's
  span from the hook's call to its future's completion (`fut.then`).
- FSDP2: its public `set_custom_all_gather` / `set_custom_reduce_scatter` on every sharded
  module, given the default comms (`DefaultAllGather`, `DefaultReduceScatter`, from
  torch's private `_fully_shard` modules: the interface is public, its classes are not
  exported) wrapped to mark their spans. What the step waited for is not measured there:
  an all-gather is prefetched behind the previous block's compute and the host does not
  see when compute blocked on it, so `comm_exposed_s` is null under FSDP.

Cost: two `perf_counter` calls and a list per collective (a few per step), no sync. On CPU
(gloo) a span ends when gloo's thread completes the future. On CUDA each mark records an
event from a pool (as `ForwardClock` does), read after the log point's sync: the start on
the stream that launches the collective, the end in the future's callback, which runs with
the streams the collective's result is ready on (an NCCL future's value is ready when the
NCCL work is). That CUDA path is unrun here: no GPU in this project's tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

Span = tuple[float, float]

__all__ = ["CommClock", "exposed_seconds", "union_seconds"]


def union_seconds(spans: Iterable[Span]) -> float:
    """Seconds covered by at least one span (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def exposed_seconds(spans: Iterable[Span], compute_end: float) -> float:
    """The part of the spans' union after `compute_end`: what nothing hid."""
    return union_seconds((max(s, compute_end), e) for s, e in spans if e > compute_end)


class CommClock:
    """Collective spans of one log interval; `read()` after the interval's sync.

    A span is `[start, end, step]` (end None until the collective completes; step the
    DDP iteration it belongs to). `exposed` says whether the strategy can tell what the
    step waited for (DDP yes, FSDP no)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.exposed = False
        self._free: list[Any] = []  # CUDA events read already, ready to record again
        self.reset()

    # ------------------------------------------------------------------ marks
    def now(self) -> Any:
        """The current time: perf_counter seconds, or a CUDA event recorded on the
        current stream."""
        if not self.cuda:
            return time.perf_counter()
        event = self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def begin(self, last: bool = False) -> list[Any]:
        """A collective launched now; `last`: the iteration's last DDP bucket (the
        backward's compute is over), so the next span belongs to the next step."""
        span = [self.now(), None, self._step]
        self._spans.append(span)
        if last:
            self._compute_end[self._step] = span[0]
            self._step += 1
        return span

    def end(self, span: list[Any]) -> None:
        """The collective of `span` completed now (a late one of a reset interval writes
        into a span no longer read)."""
        span[1] = self.now()

    def finish(self, span: list[Any], work: dist.Work | None) -> None:
        """End `span` when `work` completes: at once for a synchronous call (gloo returned
        after the collective; NCCL's stream waits for it), else in its future's callback."""
        if work is None:
            self.end(span)
        else:
            work.get_future().then(lambda _: self.end(span))

    # ------------------------------------------------------------------ reading
    def reset(self) -> None:
        """Drop the interval's spans; their CUDA events go back to the pool."""
        spans = getattr(self, "_spans", [])
        if self.cuda:
            self._free.extend(m for span in spans if span[1] is not None for m in span[:2])
        self._spans: list[list[Any]] = []
        self._compute_end: dict[int, Any] = {}
        self._step = 0

    def read(self) -> tuple[float, float | None]:
        """(seconds in collectives, seconds of them exposed or None) since the last reset,
        summed over the interval's steps (CUDA: call after a sync), then reset. A span
        still open (none at a log point) is left out."""
        done = [s for s in self._spans if s[1] is not None]
        if self.cuda and done:
            base = done[0][0]
            done = [[base.elapsed_time(s[0]) / 1e3, base.elapsed_time(s[1]) / 1e3, s[2]]
                    for s in done]  # fmt: skip
            ends = {k: base.elapsed_time(v) / 1e3 for k, v in self._compute_end.items()}
        else:
            ends = dict(self._compute_end)
        spans: list[Span] = [(s[0], s[1]) for s in done]
        comm = union_seconds(spans)
        exposed = None
        if self.exposed:
            exposed = sum(
                exposed_seconds(((s[0], s[1]) for s in done if s[2] == step), end)
                for step, end in ends.items()
            )
        self.reset()
        return comm, exposed

    # ------------------------------------------------------------------ attaching
    def attach_ddp(self, ddp: nn.Module) -> None:
        """Time DDP's bucket all-reduces: the default hook, wrapped."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def timed_allreduce(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
            span = self.begin(last=bucket.is_last())
            fut = allreduce_hook(state, bucket)

            def done(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
                self.end(span)
                return f.value()

            return fut.then(done)

        # DDP checks a hook's annotations against dist.GradBucket and Future[Tensor]; this
        # module's are postponed (strings), so the hook goes without them
        timed_allreduce.__annotations__.clear()
        self.exposed = True
        ddp.register_comm_hook(None, timed_allreduce)  # type: ignore[operator]

    def attach_fsdp(self, modules: Sequence[nn.Module]) -> None:
        """Time FSDP2's all-gathers and reduce-scatters on every sharded module."""
        gather, scatter = timed_fsdp_comms(self)
        for module in modules:
            module.set_custom_all_gather(gather)  # type: ignore[operator]
            module.set_custom_reduce_scatter(scatter)  # type: ignore[operator]
        self.exposed = False


def timed_fsdp_comms(clock: CommClock) -> tuple[Any, Any]:
    """FSDP2's default all-gather and reduce-scatter, each call a span of `clock`."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    def timed(base: type) -> Any:
        """An instance of FSDP's comm class `base` whose every call is a span."""

        class Timed(base):  # type: ignore[valid-type,misc]
            def __call__(self, *args: Any, **kwargs: Any) -> dist.Work | None:
                span = clock.begin()
                work = super().__call__(*args, **kwargs)
                clock.finish(span, work)
                return work

        Timed.__name__ = f"Timed{base.__name__.removeprefix('Default')}"
        return Timed()

    return timed(DefaultAllGather), timed(DefaultReduceScatter)
