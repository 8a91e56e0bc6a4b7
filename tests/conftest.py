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
    return set(os.listdir("/dev/shm"))


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
