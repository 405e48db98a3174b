"""The per-rank table of the Throughput panel (DDP, FSDP): pure functions of the newest
train record's per-rank lists, no Textual, no torch.

Each rank's own work (data wait + forward: the straggler measure), its memory (the device
allocator's peak where there is one, else host RSS), its share of the step in collectives
(and of that, what the step waited for, DDP) and, when the job spans several nodes, one row
per node. Widgets call these and only lay the results out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuitrain.metrics.format import DASH, human_bytes
from tuitrain.metrics.records import Record, straggler
from tuitrain.ui.view import format_seconds, median

MAX_RANK_ROWS = 4  # more ranks: the slowest ones, then a count of the rest
MAX_NODE_ROWS = 4  # more nodes: the slowest ones, then a count of the rest


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    step_time_s: float | None
    busy_s: float  # data wait + forward per step: what the rank does on its own
    vs_median: float  # busy_s / the median rank's
    straggler: bool
    mem_bytes: float | None = None  # its device allocator peak, else its host RSS
    comm_frac: float | None = None  # share of the step in collectives
    exposed_frac: float | None = None  # of the step, the collectives it waited for (DDP)
    node: int = 0


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node's ranks summed up: the slowest one's own work, the largest memory and
    comm share among them."""

    node: int
    ranks: tuple[int, ...]
    busy_s: float
    vs_median: float  # the node's slowest rank against the median rank
    mem_bytes: float | None
    comm_frac: float | None
    exposed_frac: float | None


def per_rank(latest: Record, key: str, n: int) -> list[float | None]:
    """The per-rank list `key` of the record, None per rank where it is absent or short
    (or null: a script's rank that has not reported yet)."""
    values = latest.get(key)
    if not isinstance(values, list) or len(values) != n:
        return [None] * n
    return [None if v is None else float(v) for v in values]


def work_measure(latest: Record | None) -> tuple[str, str]:
    """What the table compares the ranks by, and its column header: each rank's own work
    (data wait + forward, `rank_busy_s`: the engine's straggler measure), else its step
    time (`rank_step_time_s`: a script's ranks, whose client sees no forward pass)."""
    if (latest or {}).get("rank_busy_s"):
        return "rank_busy_s", "data+fwd"
    return "rank_step_time_s", "step"


def rank_memory(latest: Record | None) -> tuple[str, str]:
    """The memory the table shows and its column header: each rank's device allocator
    peak where the device has one (CUDA), else its host RSS."""
    if (latest or {}).get("rank_mem_peak_bytes"):
        return "rank_mem_peak_bytes", "dev peak"
    return "rank_host_rss_bytes", "RSS"


def all_rank_rows(latest: Record | None) -> list[RankRow]:
    """Every rank at the last log point (DDP, FSDP), in rank order; [] for one process.

    Ranks run in lockstep, so their step times are equal; their own work (data wait +
    forward, `rank_busy_s`) is what shows a straggler. A script's ranks have only their
    step times (`work_measure`); a rank without a figure yet shows a dash and no verdict.
    """
    latest = latest or {}
    key = work_measure(latest)[0]
    raw = latest.get(key)
    n = len(raw) if isinstance(raw, list) else 0
    if n < 2:
        return []
    busy = [math.nan if v is None else v for v in per_rank(latest, key, n)]
    mid = median(busy) or 0.0
    slow = straggler(busy)
    steps = per_rank(latest, "rank_step_time_s", n)
    mem = per_rank(latest, rank_memory(latest)[0], n)
    comm = per_rank(latest, "rank_comm_frac", n)
    exposed = per_rank(latest, "rank_comm_exposed_frac", n)
    nodes = per_rank(latest, "rank_node", n)
    return [
        RankRow(
            rank=r,
            step_time_s=steps[r],
            busy_s=t,
            vs_median=t / mid if mid > 0 else math.nan,
            straggler=r == slow,
            mem_bytes=mem[r],
            comm_frac=comm[r],
            exposed_frac=exposed[r],
            node=int(nodes[r] or 0),
        )
        for r, t in enumerate(busy)
    ]


def rank_rows(latest: Record | None) -> tuple[list[RankRow], int]:
    """Each rank at the last log point (DDP, FSDP): the rows to show, slowest first when
    there are more than MAX_RANK_ROWS, and how many ranks were left out."""
    rows = all_rank_rows(latest)
    if len(rows) <= MAX_RANK_ROWS:
        return rows, 0
    shown = sorted(rows, key=lambda row: -slowness(row.busy_s))[: MAX_RANK_ROWS - 1]
    return shown, len(rows) - len(shown)


def slowness(seconds: float) -> float:
    """A sort key, slowest first: a rank without a figure (NaN) first of all, since it may
    be the one that is stuck."""
    return math.inf if math.isnan(seconds) else seconds


def largest(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def node_rows(latest: Record | None) -> tuple[list[NodeRow], int]:
    """One row per node when the job spans more than one (`rank_node`), slowest first
    when there are more than MAX_NODE_ROWS, and how many nodes were left out."""
    rows = all_rank_rows(latest)
    if len({row.node for row in rows}) < 2:
        return [], 0
    nodes = []
    for node in sorted({row.node for row in rows}):
        mine = [row for row in rows if row.node == node]
        slowest = max(mine, key=lambda row: slowness(row.busy_s))
        nodes.append(
            NodeRow(
                node=node,
                ranks=tuple(row.rank for row in mine),
                busy_s=slowest.busy_s,
                vs_median=slowest.vs_median,
                mem_bytes=largest([row.mem_bytes for row in mine]),
                comm_frac=largest([row.comm_frac for row in mine]),
                exposed_frac=largest([row.exposed_frac for row in mine]),
            )
        )
    if len(nodes) <= MAX_NODE_ROWS:
        return nodes, 0
    shown = sorted(nodes, key=lambda row: -slowness(row.busy_s))[: MAX_NODE_ROWS - 1]
    return shown, len(nodes) - len(shown)


def comm_share(comm: float | None, exposed: float | None) -> str:
    """``12%/3%``: the step's share in collectives and, where measured, the share the step
    waited for; ``12%`` without the second; a dash without either."""
    if comm is None or not math.isfinite(comm):
        return DASH
    if exposed is None or not math.isfinite(exposed):
        return f"{comm * 100:.0f}%"
    return f"{comm * 100:.0f}%/{exposed * 100:.0f}%"


def rank_note(latest: Record | None) -> str:
    """One line for compact layouts, where the table does not fit: the straggler when there
    is one, else how many ranks are even ('' for one process); then the nodes and the
    largest share of a step in collectives, when known."""
    rows = all_rank_rows(latest)
    if not rows:
        return ""
    slow = next((row for row in rows if row.straggler), None)
    if slow is not None:
        note = f"[$warning]⚠ rank {slow.rank} straggler {slow.vs_median:.2f}× median[/]"
    else:
        note = f"{len(rows)} ranks even"
    nodes = len({row.node for row in rows})
    if nodes > 1:
        note += f" on {nodes} nodes"
    comm = largest([row.comm_frac for row in rows])
    if comm is not None:
        note += f" · comm ≤{comm * 100:.0f}%"
    return note


def short_bytes(n: float | None) -> str:
    """Bytes in at most 8 characters, three significant digits: ``80.0 GiB``, ``1.21 GiB``,
    ``750 MiB`` (human_bytes with fewer decimals, for the rank table's narrow column)."""
    if n is None or not math.isfinite(n) or n < 2**20:
        return human_bytes(n)
    unit, div = next((u, d) for u, d in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)) if n >= d)
    value = n / div
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.{digits}f} {unit}"


def node_label(node: NodeRow) -> str:
    """``node 1: 4–7`` (its ranks, when consecutive as torchrun gives them), else
    ``node 1: 4 ranks``."""
    lo, hi = node.ranks[0], node.ranks[-1]
    if list(node.ranks) == list(range(lo, hi + 1)):
        return f"node {node.node}: {lo}–{hi}" if hi > lo else f"node {node.node}: {lo}"
    return f"node {node.node}: {len(node.ranks)} ranks"


def rank_table(latest: Record | None, width: int | None = None) -> str:
    """Content markup: a per-rank table with the straggler flagged ('' for one process):
    each rank's own work (data + forward) against the median rank's, its memory (device
    peak, else host RSS) and its share of the step in collectives (/ exposed, DDP); above
    them one summary row per node when the job spans more than one.

    No step column: the ranks run in lockstep, so their step times are equal (the panel's
    step line has it), and without it the table fits the panel's 49 columns of a
    160-column terminal; the straggler's ⚠ ends its row, its name the last line. Narrower
    (`width`, the panel's columns: a 120-column terminal's panel has 38), the ×median column
    goes first (the last line names the straggler's ratio), then the comm share, then memory:
    a row never wraps."""
    rows, rest = rank_rows(latest)
    if not rows:
        return ""
    nodes, more_nodes = node_rows(latest)
    labels = [node_label(node) for node in nodes]
    first = max([4, *map(len, labels)])
    comm_header = "comm/exp" if any(row.exposed_frac is not None for row in rows) else "comm"
    work = work_measure(latest)[1]
    mem_header = rank_memory(latest)[1]
    widths = {"×med": 4, mem_header: 8, comm_header: 8}
    shown = ["×med", mem_header, comm_header]  # left to right, after the rank and its work

    def fits(names: list[str]) -> bool:  # the rank, its work, the columns, a straggler's ⚠
        return width is None or first + 10 + sum(2 + widths[n] for n in names) + 2 <= width

    for name in ("×med", comm_header, mem_header):  # dropped in this order where narrow
        if fits(shown):
            break
        shown.remove(name)

    def line(label: str, busy_s: float, vs_median: float, mem: float | None, comm: str) -> str:
        values = {
            "×med": f"{vs_median:.2f}" if math.isfinite(vs_median) else DASH,
            mem_header: short_bytes(mem),
            comm_header: comm,
        }
        cells = "".join(f"  {values[name]:>{widths[name]}}" for name in shown)
        return f"{label:>{first}}  {format_seconds(busy_s):>8}{cells}"

    heads = "".join(f"  {name:>{widths[name]}}" for name in shown)
    lines = [f"[b]{'rank':>{first}}  {work:>8}{heads}[/b]"]
    for label, node in zip(labels, nodes, strict=True):
        comm = comm_share(node.comm_frac, node.exposed_frac)
        lines.append(line(label, node.busy_s, node.vs_median, node.mem_bytes, comm))
    if more_nodes:
        lines.append(f"[dim]… {more_nodes} more nodes, all faster[/dim]")
    for row in rows:
        comm = comm_share(row.comm_frac, row.exposed_frac)
        flag = " [$warning]⚠[/]" if row.straggler else ""
        lines.append(line(str(row.rank), row.busy_s, row.vs_median, row.mem_bytes, comm) + flag)
    if rest:
        lines.append(f"[dim]… {rest} more ranks, all faster[/dim]")
    slow = next((row for row in rows if row.straggler), None)
    if slow is not None:
        lines.append(
            f"[$warning]⚠ straggler: rank {slow.rank}, {work} {slow.vs_median:.2f}× median[/]"
        )
    return "\n".join(lines)
