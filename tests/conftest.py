"""Shared fixtures: the test envs (registered at import) and process/shared-memory checks."""

from __future__ import annotations

import gc
import multiprocessing
import os
from pathlib import Path

import _envs  # noqa: F401  (registers the test env ids)
import pytest


def child_pids() -> set[int]:
    """Live child processes of this process, the multiprocessing resource tracker aside."""
    pids = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids.update(int(pid) for pid in (task / "children").read_text().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    tracker = multiprocessing.resource_tracker._resource_tracker._pid
    return pids - {tracker}


def shm_entries() -> set[str]:
    """/dev/shm entries that this process maps.

    Other processes on the machine make entries of their own; ours are told apart by inode
    (glibc maps a semaphore under a temporary name, then links it to its real one).
    """
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


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a child process or a /dev/shm entry behind."""
    children, shm = child_pids(), shm_entries()
    yield
    gc.collect()
    multiprocessing.active_children()  # reap finished children
    assert child_pids() - children == set()
    assert shm_entries() - shm == set()
