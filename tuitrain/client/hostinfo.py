"""What the client reads of its own process without torch: its resident memory. Apart from
`tuitrain.client.core` so that `tuitrain.client.ranks` can read it too without importing
the client's core (which imports ranks)."""

from __future__ import annotations

import os


def host_rss_bytes() -> int:
    """Resident set size of this process (/proc/self/statm; the peak where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB
