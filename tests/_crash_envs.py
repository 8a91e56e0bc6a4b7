"""Sub-envs for the crash tests (test_crash.py): big replies, hangs in a worker; and how a
test tells that a process still runs.

Each behaviour that would stop a test (a hang, a sleep) happens only in a worker process
(``multiprocessing.parent_process()`` is set there): the env a vector env builds in the
calling process to read the spaces behaves.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import gymnasium as gym

# the size of a big reply (test_crash.py runs with less: GYMVEC_CRASH_INFO_BYTES)
BIG_INFO_BYTES = int(os.environ.get("GYMVEC_CRASH_INFO_BYTES", 20_000_000))


def in_worker() -> bool:
    return multiprocessing.parent_process() is not None


class CrashCartPole(gym.Wrapper):
    """CartPole that, in a worker: returns a ``BIG_INFO_BYTES`` info string with each step
    (``big_info``), sleeps ``step_s`` in each step, sleeps ``close_s`` in ``close``, sleeps
    ``factory_s`` in its factory; counts its steps."""

    def __init__(self, big_info=False, step_s=0.0, close_s=0.0, factory_s=0.0):
        super().__init__(gym.make("CartPole-v1"))
        self.big_info, self.step_s, self.close_s = big_info, step_s, close_s
        self.steps = 0
        if factory_s and in_worker():
            time.sleep(factory_s)

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        if in_worker():
            if self.step_s:
                time.sleep(self.step_s)
            if self.big_info:
                info = dict(info, blob="x" * BIG_INFO_BYTES)
        return obs, reward, terminated, truncated, info

    def close(self):
        if self.close_s and in_worker():
            time.sleep(self.close_s)
        super().close()


def make(**kwargs):
    return CrashCartPole(**kwargs)


class BadCloseInWorker(CrashCartPole):
    def close(self):
        super().close()
        if in_worker():
            raise RuntimeError("worker close failed on purpose")


def make_bad_close():
    return BadCloseInWorker()


def running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie waits only for its reaper)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status
