"""What a process holds, read from /proc (Linux): memory, file descriptors, threads, child
processes and /dev/shm entries. The soak samples them; the tests' leak checks use them too.

Elsewhere than Linux, the readings are None (or empty).

    >>> from gymvec.bench import resources
    >>> resources.open_fds() > 0, resources.status_field("self", "Threads") >= 1
    (True, True)
    >>> import multiprocessing
    >>> child = multiprocessing.get_context("fork").Process(target=int)
    >>> child.start(); child.pid in resources.child_pids()
    True
    >>> child.join(); child.pid in resources.child_pids()
    False
"""

from __future__ import annotations

import multiprocessing.resource_tracker
import os
from pathlib import Path


def child_pids() -> set[int]:
    """Live child processes of this process, the multiprocessing resource tracker aside."""
    pids: set[int] = set()
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not tasks.exists():
        return pids
    for task in tasks.iterdir():
        try:
            pids.update(int(pid) for pid in (task / "children").read_text().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    # _pid is private (typeshed does not declare it): None until the tracker has started.
    tracker = getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None)
    return pids - {tracker}


def shm_entries() -> set[str]:
    """/dev/shm entries that this process maps.

    Other processes on the machine make entries of their own; ours are told apart by inode
    (glibc maps a semaphore under a temporary name, then links it to its real one).
    """
    if not os.path.isdir("/dev/shm"):
        return set()
    shm_dev = os.stat("/dev/shm").st_dev
    mapped_inodes = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5].startswith("/dev/shm/"):
            mapped_inodes.add(int(fields[4]))
    entries = set()
    for entry in os.scandir("/dev/shm"):
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed meanwhile
            continue
        if stat.st_dev == shm_dev and stat.st_ino in mapped_inodes:
            entries.add(entry.name)
    return entries


def open_fds() -> int | None:
    """How many file descriptors this process has open."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except FileNotFoundError:
        return None


def status_field(pid: int | str, name: str) -> int | None:
    """A number of /proc/<pid>/status: ``VmRSS`` (kB), ``Threads``..., None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None
    return None


def rss_mb(pid: int | str = "self") -> float | None:
    kb = status_field(pid, "VmRSS")
    return None if kb is None else kb / 1024


def children_rss_mb(pids: set[int]) -> float:
    """The resident memory of these processes together (those gone count nothing)."""
    return sum(rss_mb(pid) or 0.0 for pid in pids)


def pss_mb(pid: int | str = "self") -> float | None:
    """The proportional set size (shared pages split among the processes that map them), or
    None where /proc/<pid>/smaps_rollup cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
        return None
    return None


def process_tree_mb() -> float | None:
    """The memory of this process and its children together: the sum of their PSS (pages
    shared after a fork count once), or of their RSS where PSS is not available."""
    pids: list[int | str] = ["self", *child_pids()]
    pss = [pss_mb(pid) for pid in pids]
    if pss[0] is not None:
        return sum(value or 0.0 for value in pss)
    rss = [rss_mb(pid) for pid in pids]
    return None if rss[0] is None else sum(value or 0.0 for value in rss)
