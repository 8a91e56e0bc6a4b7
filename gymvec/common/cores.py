"""How many cores this process may run on (its CPU affinity, where the platform says)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may use: its affinity set on Linux, else the CPU count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
