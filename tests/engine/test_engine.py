"""The engine's options that reach the drop-ins: ``max_concurrency`` and ``call_wait``'s timeout."""

from __future__ import annotations

import functools
import multiprocessing
import time

import gymnasium as gym
import numpy as np
import pytest
from _envs import TimedEnv

from gymvec import ParallelVectorEnv, SerialEnv, SerialVectorEnv


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


class CountedEnv(gym.Env):
    """CartPole-like spaces; counts the instances built and closed in this process."""

    built: list = []
    closed: list = []
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        CountedEnv.built.append(self)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}

    def close(self):
        CountedEnv.closed.append(self)


@pytest.mark.parametrize(
    "make, here",
    [
        (lambda: SerialVectorEnv([CountedEnv] * 3), 3),  # as SyncVectorEnv: 3, not 4
        (lambda: SerialEnv(1, CountedEnv, envs_per_worker=3), 3),
        # one sub-env in this process (the others in forked workers, not counted here)
        (
            lambda: ParallelVectorEnv(
                [CountedEnv] * 3, num_workers=3, local_worker=True, context="fork"
            ),
            1,
        ),
        (
            lambda: ParallelVectorEnv(
                [CountedEnv] * 2, num_workers=2, local_worker=False, context="fork"
            ),
            1,  # the layout's probe, closed: sub-env 0 runs in a worker
        ),
    ],
)
def test_the_env_built_for_the_layout_is_sub_env_0_where_it_runs_here(make, here, no_leaks):
    CountedEnv.built.clear()
    CountedEnv.closed.clear()
    envs = make()
    try:
        if isinstance(envs, SerialEnv):
            envs.reset()
        else:
            envs.reset(seed=0)
            envs.step(np.zeros(envs.num_envs, dtype=np.int64))
        assert len(CountedEnv.built) == here
    finally:
        envs.close()
    assert sorted(map(id, CountedEnv.closed)) == sorted(map(id, CountedEnv.built))


def test_a_kept_env_never_used_is_closed_and_restart_builds_afresh(no_leaks):
    CountedEnv.built.clear()
    CountedEnv.closed.clear()
    env = SerialEnv(1, CountedEnv, envs_per_worker=2)  # closed before any sub-env is built
    env.close()
    assert CountedEnv.built == CountedEnv.closed and len(CountedEnv.built) == 1
    CountedEnv.built.clear()
    CountedEnv.closed.clear()
    env = SerialEnv(1, CountedEnv, envs_per_worker=2)
    env.engine.restart()  # the kept env had the old kwargs: it goes, the next use builds 2
    env.reset()
    assert len(CountedEnv.built) == 3 and CountedEnv.closed == CountedEnv.built[:1]
    env.close()


def test_engines_satisfy_their_protocols_and_the_face_checks_them():
    # The front ends test engines with isinstance against engine.protocol, never by probing
    # attributes: the engine has first-ready commands, a tensordict env behind the face none.
    from gymvec import GymEnv
    from gymvec.engine.protocol import Engine, FirstReadyEngine
    from gymvec.vector.tensordict_engine import TensorDictEngine

    with SerialEnv(2, lambda: GymEnv("CartPole-v1")) as env:
        assert isinstance(env.engine, FirstReadyEngine) and isinstance(env.engine, Engine)
        other = TensorDictEngine(env)
        assert isinstance(other, Engine) and not isinstance(other, FirstReadyEngine)
    assert not isinstance(object(), Engine)


def test_a_backend_starts_from_what_it_needs_not_from_the_engine():
    # ExecutorStart holds each worker's factories (sub-env 0's hands over the env kept from
    # learning the layout), the rows and the shared memory: nothing of the engine itself.
    from gymvec.engine import BatchEngine, ExecutorStart, SubEnvFactories, serial_backend

    seen = []
    backend = serial_backend()
    start = backend.start
    backend.start = lambda plan: seen.append(plan) or start(plan)
    engine = BatchEngine(SubEnvFactories(2, lambda: gym.make("CartPole-v1"), None, 2), backend)
    try:
        engine.reset()
        (plan,) = seen
        assert type(plan) is ExecutorStart and plan.bounds == [(0, 2), (2, 4)]
        assert [len(fns) for fns in plan.worker_env_fns] == [2, 2]
        assert plan.shared.buffers is engine.buffers
    finally:
        engine.close()
