"""The engine's options that reach the drop-ins: ``max_concurrency`` and ``call_wait``'s timeout."""

from __future__ import annotations

import functools
import multiprocessing
import time

import numpy as np
import pytest
from _envs import TimedEnv

from gymvec import ParallelVectorEnv


def overlaps(intervals: list[tuple[float, float]]) -> int:
    """How many pairs of the (start, end) intervals overlap."""
    intervals = sorted(intervals)
    return sum(
        1 for i, (_, end) in enumerate(intervals) for start, _ in intervals[i + 1 :] if start < end
    )


def step_intervals(envs: ParallelVectorEnv, steps: int) -> list[tuple[float, float]]:
    intervals = []
    for _ in range(steps):
        infos = envs.step(np.zeros(envs.num_envs, dtype=np.int64))[-1]
        intervals += list(zip(infos["start"].tolist(), infos["end"].tolist()))
    return intervals


@pytest.mark.parametrize("max_concurrency, overlapping", [(1, False), (None, True)])
def test_max_concurrency_limits_the_sub_envs_running_at_once(max_concurrency, overlapping):
    fns = [functools.partial(TimedEnv, 0.03)] * 4
    envs = ParallelVectorEnv(
        fns, num_workers=2, local_worker=True, context="fork", max_concurrency=max_concurrency
    )
    try:
        envs.reset(seed=0)
        intervals = step_intervals(envs, 3)
        assert len(intervals) == 12
        assert (overlaps(intervals) > 0) == overlapping
    finally:
        envs.close()


def test_max_concurrency_two_lets_two_run_at_once():
    fns = [functools.partial(TimedEnv, 0.03)] * 6
    envs = ParallelVectorEnv(
        fns, num_workers=3, local_worker=False, context="fork", max_concurrency=2
    )
    try:
        envs.reset(seed=0)
        intervals = step_intervals(envs, 2)
        for start, end in intervals:  # never three at the same moment
            middle = (start + end) / 2
            assert sum(s <= middle <= e for s, e in intervals) <= 2
        assert overlaps(intervals) > 0
    finally:
        envs.close()


def test_call_wait_times_out_and_the_call_is_given_up():
    envs = ParallelVectorEnv([TimedEnv] * 2, num_workers=2, local_worker=False, context="fork")
    try:
        envs.reset(seed=0)
        envs.call_async("slow_method", 1.0)
        start = time.monotonic()
        with pytest.raises(multiprocessing.TimeoutError, match="call_wait` has timed out"):
            envs.call_wait(timeout=0.1)
        assert time.monotonic() - start < 0.8
        # as AsyncVectorEnv, the call is given up: the env takes the next one at once
        obs, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 1)
        assert envs.call("slow_method", 0.0) == ("done", "done")
    finally:
        envs.close()


def test_call_wait_within_its_timeout_returns_the_results():
    envs = ParallelVectorEnv([TimedEnv] * 2, num_workers=2, local_worker=False, context="fork")
    try:
        envs.call_async("slow_method", 0.05)
        assert envs.call_wait(timeout=5.0) == ("done", "done")
    finally:
        envs.close()
