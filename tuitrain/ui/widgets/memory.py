"""Memory panel: this process's allocator (allocated / reserved / peak), apart from the
device-wide memory in use (all processes, NVML or cudaMemGetInfo) against the total, and NVML
utilisation; on CPU the host RSS, labelled as such. Below them a line of what the host is
doing now (CPU use, disk and network rates; `tuitrain.ui.system`), refreshed at every poll
whether or not a record arrived."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.widgets import Static

from tuitrain.metrics.format import DASH, human_bytes
from tuitrain.metrics.store import Series, Snapshot
from tuitrain.ui.system import HostRates, host_line
from tuitrain.ui.view import Frame, pick_unit
from tuitrain.ui.widgets.chart import Line, MetricChart
from tuitrain.ui.widgets.panel import Panel, compact_layout

TOTAL_KEY = "device_memory_bytes"  # header field: total device memory, where the engine knows


def short_bytes(n: float | None) -> str:
    """`human_bytes` without needless decimals: 140.00 GiB -> 140 GiB, 1.20 GiB stays."""
    text = human_bytes(n)
    number, _, unit = text.partition(" ")
    if unit == "GiB" and float(number) >= 100:
        return f"{float(number):.0f} GiB"
    return text


WIDE = 52  # summary columns from which the long form fits on two lines


def util_text(latest: Mapping[str, Any]) -> str:
    util = latest.get("gpu_util_pct")
    return f"util {util:.0f}%" if util is not None else "util — (no NVML)"


def _bare(text: str, unit: str) -> str:
    """'1.60 GiB' -> '1.60' when `unit` (the total's) says GiB already."""
    number, _, own = text.partition(" ")
    return number if own == unit and unit else text


def _share(part: float | None, total: float | None) -> str:
    if part is None or not total:
        return ""
    return f" ({part / total * 100:.0f}%)"


class MemoryPanel(Panel):
    """Device memory when the run has it; the host RSS otherwise (CPU runs)."""

    TITLE = "Memory"
    SERIES = ("mem_alloc_bytes", "mem_reserved_bytes", "host_rss_bytes")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host_text = Static("", classes="summary host", markup=False)
        self._host_shown = ""

    def compose(self) -> ComposeResult:
        yield self.summary_text
        yield self.host_text
        yield self.chart
        yield self.spark

    def refresh_host(self, rates: HostRates) -> None:
        """The host line: what the machine did since the last sample."""
        compact = compact_layout(self.screen)
        text = host_line(rates, self.host_text.content_size.width or None, compact)
        if text != self._host_shown:
            self._host_shown = text
            self.host_text.update(text)

    @staticmethod
    def on_device(snap: Snapshot) -> bool:
        return len(snap.get("mem_alloc_bytes")) > 0 or (
            snap.latest is not None and snap.latest.get("mem_alloc_bytes") is not None
        )

    def summary(self, frame: Frame) -> str:
        snap = frame.snap
        latest = snap.latest or {}
        if self.on_device(snap):
            total = (snap.header or {}).get(TOTAL_KEY)
            used = latest.get("gpu_mem_used_bytes")
            alloc = short_bytes(latest.get("mem_alloc_bytes"))
            reserved = short_bytes(latest.get("mem_reserved_bytes"))
            peak = short_bytes(latest.get("mem_peak_bytes"))
            total_text = short_bytes(total) if total else DASH
            allocator = f"[$primary]alloc[/] {alloc} · [$secondary]reserved[/] {reserved}"
            if self.summary_text.content_size.width >= WIDE:
                return (
                    f"{allocator} · peak {peak}\n"
                    f"GPU in use {short_bytes(used)} / {total_text}{_share(used, total)} "
                    f"[$foreground-muted](all processes)[/] · {util_text(latest)}"
                )
            # narrow: utilisation goes to the border (see plot); units shown once when shared
            unit = total_text.partition(" ")[2]
            return (
                f"{allocator}\n"
                f"peak {_bare(peak, unit)} · GPU used {_bare(short_bytes(used), unit)}/"
                f"{total_text}"
            )
        rss = latest.get("host_rss_bytes")
        of = f" of {short_bytes(frame.host_memory)} RAM" if frame.host_memory else ""
        return (
            f"[$primary]host RSS[/] {short_bytes(rss)}{of}{_share(rss, frame.host_memory)}\n"
            "[$foreground-muted]CPU run: process memory, no device memory[/]"
        )

    def plot(self, chart: MetricChart, snap: Snapshot, buckets: int) -> None:
        if self.on_device(snap):
            names: tuple[tuple[str, str], ...] = (
                ("mem_alloc_bytes", "primary"),
                ("mem_reserved_bytes", "secondary"),
            )
        else:
            names = (("host_rss_bytes", "primary"),)
        series = [(snap.get(name), color) for name, color in names]
        top = max((max(s.ys) for s, _ in series if len(s)), default=0.0)
        div, unit = pick_unit(top)
        lines: Sequence[Line] = [
            Line(xs, [y / div for y in ys], color=color)
            for s, color in series
            for xs, ys in [s.decimate(buckets)]
        ]
        subtitle = f"y in {unit}" if top else ""
        if self.on_device(snap) and self.summary_text.content_size.width < WIDE:
            subtitle = " · ".join(t for t in (util_text(snap.latest or {}), subtitle) if t)
        self.border_subtitle = subtitle
        chart.draw(lines, ylim=(0.0, top / div * 1.1 if top else 1.0))

    def spark_series(self, snap: Snapshot) -> Series:
        # no chart, no "y in MiB"; on a device the utilisation stays where narrow puts it
        on_device = self.on_device(snap)
        narrow = self.summary_text.content_size.width < WIDE
        self.border_subtitle = util_text(snap.latest or {}) if on_device and narrow else ""
        name = "mem_reserved_bytes" if on_device else "host_rss_bytes"
        return snap.get(name)
