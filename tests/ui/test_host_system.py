"""The host line's sampler: CPU use, disk and network rates from two /proc snapshots."""

from __future__ import annotations

from pathlib import Path

from tests.ui.pilot_tools import text_of, wait_for
from tests.ui.run_fixture import finished_run, watch_app
from tuitrain.ui.system import HostRates, HostSampler, host_line
from tuitrain.ui.widgets.memory import MemoryPanel

NET_HEAD = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop"
    " fifo colls carrier compressed\n"
)


def write_proc(root: Path, cpu: str, disks: list[str], net: list[str]) -> None:
    (root / "proc" / "net").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "stat").write_text(f"cpu  {cpu}\ncpu0 {cpu}\nintr 1 2 3\n")
    (root / "proc" / "diskstats").write_text("\n".join(disks) + "\n")
    (root / "proc" / "net" / "dev").write_text(NET_HEAD + "\n".join(net) + "\n")


def disk(name: str, read: int, written: int) -> str:
    # major minor name reads merged SECTORS_READ ms writes merged SECTORS_WRITTEN ms ...
    return f"   8       0 {name} 10 0 {read} 5 20 0 {written} 7 0 9 12 0 0 0 0"


def iface(name: str, rx: int, tx: int) -> str:
    return f"  {name}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rates_come_from_two_samples_of_whole_disks_and_real_interfaces(tmp_path: Path) -> None:
    clock = Clock()
    sampler = HostSampler(tmp_path, clock)
    # user nice system idle iowait irq softirq steal guest guest_nice
    write_proc(
        tmp_path,
        "1000 0 500 8000 500 0 0 0 300 0",
        [disk("sda", 1000, 2000), disk("sda1", 1000, 2000), disk("loop0", 50, 0),
         disk("nvme0n1", 0, 0), disk("nvme0n1p1", 0, 0)],
        [iface("lo", 10**9, 10**9), iface("eth0", 5000, 1000)],
    )  # fmt: skip
    first = sampler.sample()
    assert first == HostRates()  # one sample: no rate yet
    assert host_line(first) == "host CPU — · disk r — w — · net rx — tx —"

    clock.now += 2.0
    write_proc(
        tmp_path,
        "1600 0 600 8200 600 0 0 0 900 0",  # busy +700 of +1000 jiffies (guest inside user)
        [disk("sda", 1000 + 4096, 2000 + 8192), disk("sda1", 1000 + 4096, 2000 + 8192),
         disk("loop0", 50 + 999, 0), disk("nvme0n1", 2048, 0), disk("nvme0n1p1", 2048, 0)],
        [iface("lo", 2 * 10**9, 2 * 10**9), iface("eth0", 5000 + 4096, 1000 + 2048)],
    )  # fmt: skip
    rates = sampler.sample()
    assert rates.cpu_pct == 70.0
    assert rates.disk_read_bps == (4096 + 2048) * 512 / 2.0  # sectors of sda and nvme0n1
    assert rates.disk_write_bps == 8192 * 512 / 2.0
    assert rates.net_rx_bps == 2048.0  # eth0 only, a second
    assert rates.net_tx_bps == 1024.0
    assert host_line(rates) == (
        "host CPU 70% · disk r 1.5 MiB/s w 2.0 MiB/s · net rx 2.0 KiB/s tx 1.0 KiB/s"
    )


def test_no_proc_reads_as_unknown_and_a_quick_second_sample_keeps_the_rates(
    tmp_path: Path,
) -> None:
    clock = Clock()
    sampler = HostSampler(tmp_path, clock)  # no proc/ under it: another OS
    sampler.sample()
    clock.now += 1.0
    assert sampler.sample() == HostRates()
    write_proc(tmp_path, "1 0 0 1 0 0 0 0 0 0", [], [])
    clock.now += 1.0
    sampler.sample()
    write_proc(tmp_path, "3 0 0 3 0 0 0 0 0 0", [], [])
    clock.now += 1.0
    assert sampler.sample().cpu_pct == 50.0
    write_proc(tmp_path, "9 0 0 3 0 0 0 0 0 0", [], [])
    clock.now += 0.2  # too soon to average over: the last rates stand
    assert sampler.sample().cpu_pct == 50.0


def test_the_line_goes_to_two_lines_where_one_does_not_fit_and_short_in_compact() -> None:
    rates = HostRates(37.4, 1.5 * 2**20, 0.0, 3.4 * 2**10, 812.0)
    one = "host CPU 37% · disk r 1.5 MiB/s w 0 B/s · net rx 3.4 KiB/s tx 812 B/s"
    assert host_line(rates, width=len(one)) == one
    assert host_line(rates, width=50) == one.replace(" · net", "\nnet")
    short = "CPU 37% · disk 1.5M/0 · net 3.4K/812"
    assert host_line(rates, compact=True) == short
    assert host_line(rates, width=30) == short  # too narrow for the long form's two lines


async def test_the_memory_panel_shows_the_host_line_over_a_finished_run(tmp_path: Path) -> None:
    app, _store = watch_app(finished_run(tmp_path / "run"))
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one(MemoryPanel)
        await wait_for(pilot, lambda: "host CPU" in text_of(panel.host_text), what="host line")
        # the records never change; the line still updates, a rate from the second sample on
        await wait_for(pilot, lambda: "host CPU —" not in text_of(panel.host_text), what="a rate")
        text = text_of(panel.host_text)
        assert "%" in text and "B/s" in text and "net rx" in text, text
