"""Time in a script's collectives: the straggler measure of a torchrun job's ranks.

Synchronous data parallelism runs the ranks in lockstep: a fast rank waits for the slowest
in a collective, so every rank's step time (between its `log` calls) is the same and cannot
show who is slow. What differs is the time a rank spends outside its collectives, its own
work. The hosted engine times that as data wait + forward (`engine/ranktime.py`); a
script's loop is not the client's to time, but its collectives are seen: torch's process
group hooks (`ProcessGroup.register_pre_hook` / `register_post_hook`) call the clock when a
collective is issued, and the issued work's future says when it completed. The clock keeps
those spans and gives, for an interval between two log calls, the union of the spans within
it (DDP's buckets overlap: a second is counted once). A rank's `busy_s` is then (interval -
time in collectives) / steps: it becomes the per-rank list `rank_busy_s` in rank 0's train
records (`tuitrain.client.ranks`), the engine's field, which the straggler alert judges.

What it times: every collective issued on a gloo process group (the default group and each
other group the job made, found at the log calls that follow its creation): the script's
`dist.all_reduce` or `barrier`, DDP's gradient buckets, FSDP's gathers, torch.compile's
functional collectives. On gloo a collective's future completes when gloo's thread has
finished it, so a span is how long the host had it in flight, the wait for the other ranks
included. A collective running behind the backward (DDP's buckets) counts as time in it:
the figure compares ranks, it is not a profile.

Where it cannot, `busy_s` is null and no rank is named (the ranks view shows step times):
a group on NCCL (its future completes when the work is queued on the device's stream, so a
host clock sees no wait) or any backend but gloo; a torch without the hooks (they came in
2026: the 2.14 this project is tested with has them); an interval that began before the
hooks were on (log calls before `init_process_group`); lost spans (more than MAX_SPANS
collectives between two reports).

Cost: at each log call a length check (a process group made since), and before the first
group a call of `dist.is_initialized`; per collective two Python calls, a list, and one
future callback on gloo's thread.
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from typing import Any

HOOK_ID = 0x7475  # a process group's hooks are keyed by id: this one is tuitrain's
MAX_SPANS = 100_000  # spans kept between two reports; more and the interval's figure is null


class CollectiveClock:
    """Spans of this process's collectives; `poll()` at each log call hooks the groups that
    appeared since, `busy()` reads an interval and `release()` lets it go, `detach()` at the
    run's finish."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # [start, end or None] in the order begun: the hooks append, a reader deletes a
        # prefix (each one step under the GIL: nothing appended meanwhile is lost)
        self.spans: list[list[float | None]] = []
        self.since: float | None = None  # the hooks are on from here
        self.lost_until = float("-inf")  # spans before this were dropped (MAX_SPANS)
        self.untimed = False  # a group that cannot be timed (NCCL...): no figure at all
        self._groups: list[tuple[weakref.ref[Any], bool]] = []  # (group, hooked)
        self._seen = -1  # the number of groups the job had at the last look

    # ------------------------------------------------------------------ the script's thread
    def poll(self) -> None:
        """Hook the process groups made since the last look (cheap when there are none)."""
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            return
        world = getattr(getattr(dist, "distributed_c10d", None), "_world", None)
        groups = getattr(world, "pg_map", None)
        if groups is not None and len(groups) == self._seen:
            return
        with contextlib.suppress(Exception):  # a torch that differs: no figure, no harm
            if not dist.is_available() or not dist.is_initialized():
                self._seen = len(groups) if groups is not None else -1
                return
            found = list(groups) if groups is not None else [dist.group.WORLD]
            self._seen = len(found)
            known = {id(ref()) for ref, _ in self._groups}
            for group in found:
                if id(group) not in known:
                    self._hook(dist, group)

    def _hook(self, dist: Any, group: Any) -> None:
        ref = weakref.ref(group)  # never keeps a destroyed group alive
        try:
            timed = dist.get_backend(group) == "gloo" and hasattr(group, "register_pre_hook")
        except Exception:  # noqa: BLE001 - a group this torch cannot describe: not timed
            timed = False
        if not timed:
            self.untimed = True
            self._groups.append((ref, False))
            return
        open_spans: dict[int, list[float | None]] = {}  # op ids count per group

        def pre(args: Any) -> None:
            now = time.perf_counter()
            span: list[float | None] = [now, None]
            open_spans[args.op_id] = span
            spans = self.spans
            if len(spans) >= MAX_SPANS:  # no report for long: the older half goes
                del spans[: MAX_SPANS // 2]
                self.lost_until = now
            spans.append(span)

        def post(args: Any) -> None:
            span = open_spans.pop(args.op_id, None)
            if span is None:
                return
            work = args.work
            if work is None:
                span[1] = time.perf_counter()
                return

            def done(_: Any) -> None:
                span[1] = time.perf_counter()

            work.get_future().then(done)

        try:
            group.register_pre_hook(HOOK_ID, pre)
            group.register_post_hook(HOOK_ID, post)
        except Exception:  # noqa: BLE001 - this group's collectives go untimed: no figure
            with contextlib.suppress(Exception):
                group.unregister_pre_hook(HOOK_ID)
            self.untimed = True
            self._groups.append((ref, False))
            return
        self._groups.append((ref, True))
        if self.since is None:
            self.since = time.perf_counter()

    # ------------------------------------------------------------------ reading
    def seconds(self, start: float, end: float) -> float | None:
        """Seconds in collectives within [start, end] (perf_counter times), overlaps counted
        once; a collective still in flight counts up to `end`. None when the interval cannot
        be told: no hooks, a group they cannot time, hooks on after `start`, spans lost."""
        if self.since is None or self.untimed or start < self.since or start < self.lost_until:
            return None
        total, reach = 0.0, start
        for span in sorted(list(self.spans), key=lambda s: s[0] or 0.0):
            begin, finish = span[0] or 0.0, span[1] if span[1] is not None else end
            begin, finish = max(begin, reach), min(finish, end)
            if finish > begin:
                total += finish - begin
                reach = finish
        return total

    def busy(self, start: tuple[int, float], end: tuple[int, float]) -> float | None:
        """Seconds a step outside collectives between two log calls, each (step, time)."""
        steps = end[0] - start[0]
        comm = self.seconds(start[1], end[1]) if steps > 0 else None
        return max(end[1] - start[1] - comm, 0.0) / steps if comm is not None else None

    def release(self, until: float) -> None:
        """Let go of the spans over by `until` (the next interval starts there)."""
        spans, done = self.spans, 0
        for span in spans:  # from the first on, up to one still in flight or later
            if span[1] is None or span[1] > until:
                break
            done += 1
        del spans[:done]

    def detach(self) -> None:
        """Take the hooks off every group still alive; a later run starts afresh."""
        for ref, hooked in self._groups:
            group = ref()
            if hooked and group is not None:
                with contextlib.suppress(Exception):  # a destroyed group: nothing to undo
                    group.unregister_pre_hook(HOOK_ID)
                    group.unregister_post_hook(HOOK_ID)
        self._reset()
