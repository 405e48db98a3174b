"""The host's CPU use, disk and network rates, for the Memory panel's host line.

Read from Linux's /proc (`stat`, `diskstats`, `net/dev`) by the UI's poll, never by the
training loop. A rate needs two samples: the first reads as unknown (None, shown "—"), as does
a figure whose file is missing or unreadable (another OS, a container without /proc).

Disk counts whole disks only: partitions (`sda1`, `nvme0n1p2`) would count their disk's bytes
twice, and loop, RAM, device-mapper and RAID devices count bytes of disks already counted.
Network counts every interface but the loopback.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuitrain.metrics.format import DASH

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the disk's own size
VIRTUAL_DISKS = ("loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd")
PARTITION_TAIL = re.compile(r"p?\d+")  # sda -> sda1, nvme0n1 -> nvme0n1p1, mmcblk0 -> mmcblk0p1
MIN_INTERVAL_S = 0.9  # a sample sooner than this after the last one keeps the last rates


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative counters at one moment (None: that file could not be read)."""

    at: float  # monotonic seconds
    cpu: tuple[int, int] | None = None  # (busy, total) jiffies over all cores
    disk: tuple[int, int] | None = None  # (bytes read, bytes written), whole disks
    net: tuple[int, int] | None = None  # (bytes received, bytes sent), all but lo


@dataclass(frozen=True, slots=True)
class HostRates:
    """What the host did between two samples; None where unknown."""

    cpu_pct: float | None = None  # all cores together, 0-100
    disk_read_bps: float | None = None
    disk_write_bps: float | None = None
    net_rx_bps: float | None = None
    net_tx_bps: float | None = None


def read_cpu(text: str) -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat's `cpu` line: idle and iowait are not busy;
    guest time is already inside user time, so only the first eight fields count."""
    fields = text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError("no cpu line")
    values = [int(v) for v in fields[1:9]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def read_disks(text: str) -> tuple[int, int]:
    """(bytes read, bytes written) of the whole disks in /proc/diskstats."""
    rows = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 10:
            rows[fields[2]] = (int(fields[5]), int(fields[9]))  # sectors read, written
    disks = [
        name
        for name in rows
        if not name.startswith(VIRTUAL_DISKS)
        and not any(
            name != other
            and name.startswith(other)
            and PARTITION_TAIL.fullmatch(name[len(other) :])
            for other in rows
        )
    ]
    read = sum(rows[name][0] for name in disks)
    written = sum(rows[name][1] for name in disks)
    return read * SECTOR_BYTES, written * SECTOR_BYTES


def read_net(text: str) -> tuple[int, int]:
    """(bytes received, bytes sent) over the interfaces of /proc/net/dev, loopback aside."""
    received = sent = 0
    for line in text.splitlines()[2:]:  # two header lines
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or name.strip() == "lo" or len(fields) < 9:
            continue
        received += int(fields[0])
        sent += int(fields[8])
    return received, sent


def _read(path: Path, parse: Callable[[str], tuple[int, int]]) -> tuple[int, int] | None:
    try:
        return parse(path.read_text())
    except (OSError, ValueError, IndexError):
        return None


def _per_second(
    now: tuple[int, int] | None, then: tuple[int, int] | None, dt: float
) -> tuple[float | None, float | None]:
    if now is None or then is None or dt <= 0:
        return None, None
    return max(now[0] - then[0], 0) / dt, max(now[1] - then[1], 0) / dt


class HostSampler:
    """Samples the host's counters; `sample()` gives the rates since the previous sample."""

    def __init__(self, root: Path = Path("/"), clock: Callable[[], float] = time.monotonic):
        self.proc = root / "proc"
        self.clock = clock
        self.last: Counters | None = None
        self.rates = HostRates()

    def read(self) -> Counters:
        return Counters(
            self.clock(),
            _read(self.proc / "stat", read_cpu),
            _read(self.proc / "diskstats", read_disks),
            _read(self.proc / "net" / "dev", read_net),
        )

    def sample(self) -> HostRates:
        """The rates since the last sample (all None at the first); a sample within
        MIN_INTERVAL_S of the last keeps the last rates (too short to average over)."""
        if self.last is not None and self.clock() - self.last.at < MIN_INTERVAL_S:
            return self.rates
        now, then = self.read(), self.last
        self.last = now
        if then is None:
            return self.rates
        dt = now.at - then.at
        cpu = None
        if now.cpu is not None and then.cpu is not None and now.cpu[1] > then.cpu[1]:
            cpu = 100.0 * max(now.cpu[0] - then.cpu[0], 0) / (now.cpu[1] - then.cpu[1])
        self.rates = HostRates(
            cpu, *_per_second(now.disk, then.disk, dt), *_per_second(now.net, then.net, dt)
        )
        return self.rates


def rate_text(bps: float | None) -> str:
    """Bytes a second, short: `0 B/s`, `812 B/s`, `3.4 KiB/s`, `120 MiB/s`; unknown: —."""
    if bps is None:
        return DASH
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if bps >= div:
            value = bps / div
            return f"{value:.1f} {unit}/s" if value < 100 else f"{value:.0f} {unit}/s"
    return f"{bps:.0f} B/s"


def short_rate(bps: float | None) -> str:
    """Bytes a second in a few characters, for the compact layout: `0`, `812`, `3.4K`, `120M`."""
    text = rate_text(bps)
    number, _, unit = text.partition(" ")
    return number + ("" if unit == "B/s" else unit[:1])


def host_line(rates: HostRates, width: int | None = None, compact: bool = False) -> str:
    """`host CPU 37% · disk r 1.2 MiB/s w 0 B/s · net rx 3.4 KiB/s tx 1.0 KiB/s`: one line
    where `width` allows it (or is not given), else two, the network on the second; compact
    layouts, and widths too narrow for two, get one short line, `CPU 37% · disk 1.2M/0 ·
    net 3.4K/1.0K` (read/written, received/sent)."""
    cpu = f"{rates.cpu_pct:.0f}%" if rates.cpu_pct is not None else DASH
    head = (
        f"host CPU {cpu} · disk r {rate_text(rates.disk_read_bps)} "
        f"w {rate_text(rates.disk_write_bps)}"
    )
    if compact or (width is not None and width < len(head)):
        disk = f"{short_rate(rates.disk_read_bps)}/{short_rate(rates.disk_write_bps)}"
        net = f"{short_rate(rates.net_rx_bps)}/{short_rate(rates.net_tx_bps)}"
        return f"CPU {cpu} · disk {disk} · net {net}"
    net = f"net rx {rate_text(rates.net_rx_bps)} tx {rate_text(rates.net_tx_bps)}"
    one = f"{head} · {net}"
    return one if width is None or len(one) <= width else f"{head}\n{net}"
