"""The per-rank table's new columns (memory, share of the step in collectives) and its
per-node rows, from synthetic records."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text

from tuitrain.ui.ranks import MAX_NODE_ROWS, MAX_RANK_ROWS, node_rows, rank_note, rank_table

MiB = 2**20


def ddp(n: int, **extra: Any) -> dict[str, Any]:
    """A merged train record of `n` ranks on a CPU (host RSS, no device peak)."""
    return {
        "rank_step_time_s": [0.2] * n,
        "rank_busy_s": [0.05] * n,
        "rank_host_rss_bytes": [700 * MiB] * n,
        "rank_comm_frac": [0.3] * n,
        "rank_comm_exposed_frac": [0.1] * n,
        **extra,
    }


def plain(markup: str) -> list[str]:
    return Text.from_markup(markup.replace("$warning", "yellow")).plain.split("\n")


def test_memory_and_comm_columns() -> None:
    lines = plain(rank_table(ddp(2, rank_comm_frac=[0.3, 0.25])))
    assert lines[0].split()[-2:] == ["RSS", "comm/exp"]
    assert lines[1].split()[-3:] == ["700", "MiB", "30%/10%"]
    assert lines[2].endswith("25%/10%")
    # a device allocator: its peak, not the RSS; FSDP: no exposed share
    cuda = ddp(2, rank_mem_peak_bytes=[3 * 2**30, 2**30], rank_comm_exposed_frac=None)
    lines = plain(rank_table(cuda))
    assert lines[0].split()[-2:] == ["peak", "comm"] and "dev peak" in lines[0]
    assert lines[1].split()[-3:] == ["3.00", "GiB", "30%"]
    # a run from before these fields: dashes, the table as before
    old = plain(rank_table({"rank_step_time_s": [0.2] * 2, "rank_busy_s": [0.05, 0.1]}))
    assert old[1].split()[-2:] == ["—", "—"] and old[2].endswith("⚠")
    assert old[-1] == "⚠ straggler: rank 1, data+fwd 1.33× median"


def test_node_rows_above_the_ranks() -> None:
    busy = [0.05] * 7 + [0.2]  # rank 7, on node 1, is the straggler
    rec = ddp(8, rank_busy_s=busy, rank_node=[0] * 4 + [1] * 4,
              rank_host_rss_bytes=[700 * MiB] * 7 + [900 * MiB],
              rank_comm_frac=[0.3, 0.35, 0.3, 0.3, 0.1, 0.1, 0.1, 0.05])  # fmt: skip
    nodes, rest = node_rows(rec)
    assert [n.node for n in nodes] == [0, 1] and rest == 0 and nodes[1].ranks == (4, 5, 6, 7)
    assert nodes[1].busy_s == 0.2 and nodes[1].mem_bytes == 900 * MiB
    assert nodes[0].comm_frac == 0.35  # the node's largest share
    lines = plain(rank_table(rec))
    assert lines[1].startswith("node 0: 0–3") and lines[1].endswith("35%/10%")
    assert lines[2].startswith("node 1: 4–7") and "900 MiB" in lines[2]
    assert lines[3].split()[0] == "7" and lines[3].endswith("⚠")  # then the slowest ranks
    assert len(lines) == 3 + MAX_RANK_ROWS - 1 + 2 and "5 more ranks" in lines[-2]
    assert "straggler: rank 7" in lines[-1]
    assert node_rows(ddp(8)) == ([], 0)  # one node: no node rows
    assert "on 2 nodes" in rank_note(rec) and "comm ≤35%" in rank_note(rec)


def test_many_nodes_show_the_slowest_and_a_count() -> None:
    n = 4 * (MAX_NODE_ROWS + 2)
    busy = [0.05] * n
    busy[9] = 0.2  # node 2
    nodes, rest = node_rows(ddp(n, rank_busy_s=busy, rank_node=[r // 4 for r in range(n)]))
    assert len(nodes) == MAX_NODE_ROWS - 1 and rest == MAX_NODE_ROWS + 2 - len(nodes)
    assert nodes[0].node == 2


def test_ranks_not_consecutive_on_a_node() -> None:
    rec = ddp(4, rank_node=[0, 1, 0, 1])
    assert [n.ranks for n in node_rows(rec)[0]] == [(0, 2), (1, 3)]
    assert plain(rank_table(rec))[1].startswith("node 0: 2 ranks")


def test_table_fits_the_panel_of_a_160_column_terminal() -> None:
    """49 columns there (and so 80); the multi-node table with a straggler is the widest."""
    busy = [0.05] * 7 + [0.2]
    rec = ddp(8, rank_busy_s=busy, rank_node=[0] * 4 + [1] * 4,
              rank_mem_peak_bytes=[80 * 2**30] * 8)  # fmt: skip
    assert max(cell_len(line) for line in plain(rank_table(rec))) <= 49


def test_a_scripts_ranks_by_step_time_and_a_rank_not_reported_yet() -> None:
    """A script's run has each rank's step time and memory but no data+fwd: the table
    compares step times; a rank whose figures have not come (null) shows dashes, no verdict."""
    script = {"rank_step_time_s": [0.2, 0.4], "rank_host_rss_bytes": [700 * MiB, 900 * MiB]}
    lines = plain(rank_table(script))
    assert lines[0].split()[:2] == ["rank", "step"]
    assert lines[1].split()[:3] == ["0", "200.0", "ms"]
    assert "900 MiB" in lines[2] and lines[2].endswith("⚠")
    assert lines[-1] == "⚠ straggler: rank 1, step 1.33× median"
    waiting = plain(rank_table({"rank_step_time_s": [0.2, None, 0.2]}))
    assert waiting[2].split()[:3] == ["1", "—", "—"]
    assert not any("⚠" in line for line in waiting)
    assert rank_note({"rank_step_time_s": [0.2, None]}) == "2 ranks even"


def test_a_narrow_panel_drops_columns_instead_of_wrapping() -> None:
    """A 120-column terminal's Throughput panel has 38 columns: ×median goes first (the last
    line names the straggler's ratio), then the comm share, then memory; no row is wider."""
    rec = ddp(2, rank_busy_s=[0.05, 0.1])
    full = plain(rank_table(rec))
    assert full[0].split() == ["rank", "data+fwd", "×med", "RSS", "comm/exp"]
    for width, header in ((38, ["rank", "data+fwd", "RSS", "comm/exp"]),
                          (34, ["rank", "data+fwd", "RSS"]),
                          (20, ["rank", "data+fwd"])):  # fmt: skip
        lines = plain(rank_table(rec, width))
        assert lines[0].split() == header, width
        assert all(cell_len(line) <= width for line in lines[:-1]), (width, lines)
        assert lines[2].endswith("⚠") and lines[-1] == "⚠ straggler: rank 1, data+fwd 1.33× median"
    assert plain(rank_table(rec, 200)) == full
