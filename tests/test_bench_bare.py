"""The bench's framework-free references: they must do the same work as a vectorizer, so their
figures bound gymvec's; and like everything here, they must not hang when a worker dies."""

from __future__ import annotations

import functools
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gymvec.bench.envs import IMAGE_OBS_ID
from gymvec.bench.runners import make_env_fns
from gymvec.bench.runners.bare import FINISHED, FREE_LAG, BareLoop, BareParallel


def _rollout(env, steps: int, num_envs: int, num_actions: int = 2) -> list[tuple]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(steps):
        obs, rewards, terminated, truncated, *_ = env.step(rng.integers(0, num_actions, num_envs))
        out.append((obs.copy(), np.asarray(rewards, np.float64), terminated, truncated))
    return out


@pytest.mark.parametrize("make_bare", [BareLoop, lambda fns: BareParallel(fns, 2)])
def test_bare_runners_step_like_sync_vector_env_with_same_step_autoreset(make_bare, no_leaks):
    # CartPole with random actions ends an episode every ~20 steps: 60 steps cover many ends.
    env_fns = make_env_fns("CartPole-v1", 6)
    reference = SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    bare = make_bare(env_fns)
    try:
        reference.reset(seed=3)
        bare.reset(3)
        expected, got = _rollout(reference, 60, 6), _rollout(bare, 60, 6)
        assert sum(int(step[2].sum()) for step in expected) > 5  # episodes did end
        for (e_obs, e_rew, e_term, e_trunc), (obs, rew, term, trunc) in zip(expected, got):
            np.testing.assert_array_equal(obs, e_obs)
            np.testing.assert_array_equal(rew, e_rew)
            np.testing.assert_array_equal(term, e_term)
            np.testing.assert_array_equal(trunc, e_trunc)
    finally:
        bare.close()
        reference.close()


def test_bare_parallel_hands_out_fresh_image_batches(no_leaks):
    bare = BareParallel(make_env_fns(IMAGE_OBS_ID, 4), 2)
    try:
        bare.reset(0)
        first, *_ = bare.step(np.zeros(4, dtype=np.int64))
        kept = first.copy()
        second, *_ = bare.step(np.zeros(4, dtype=np.int64))
        assert first.shape == (4, 4, 84, 84) and first.dtype == np.uint8
        np.testing.assert_array_equal(first, kept)  # the next step did not overwrite it
        assert not np.array_equal(first, second)
    finally:
        bare.close()


@pytest.mark.parametrize("lag", [0, FREE_LAG])
def test_bare_parallel_raises_instead_of_hanging_when_its_worker_dies(lag, no_leaks):
    bare = BareParallel(make_env_fns("CartPole-v1", 4), 2, lag=lag)
    try:
        bare.reset(0)
        ((process, _, _),) = bare.workers
        os.kill(process.pid, signal.SIGKILL)
        process.join(5)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="bare-parallel"):
            for _ in range(lag + 1):  # bare-free notices when it has to wait for the worker
                bare.step(np.zeros(4, dtype=np.int64))
        assert time.monotonic() - start < 10
    finally:
        bare.close()
    assert bare.workers == []


def test_bare_runners_reject_what_they_cannot_batch():
    with pytest.raises(ValueError, match="num_workers: expected a divisor of the 4 sub-envs"):
        BareParallel(make_env_fns("CartPole-v1", 4), 3)

    def make_dict_env() -> gym.Env:
        env = gym.make("CartPole-v1")
        space = gym.spaces.Dict({"state": env.observation_space})
        return gym.wrappers.TransformObservation(env, lambda obs: {"state": obs}, space)

    with pytest.raises(ValueError, match="array observations.*got Dict"):
        BareLoop([make_dict_env] * 2)


class _SlowOutsideOf(gym.Wrapper):
    """Steps 5 ms slower in any process but ``pid``'s: a worker that trails the parent."""

    def __init__(self, env: gym.Env, pid: int):
        super().__init__(env)
        self.pid = pid

    def step(self, action):
        if os.getpid() != self.pid:
            time.sleep(0.005)
        return self.env.step(action)


def _slow_in_workers(pid: int) -> gym.Env:
    return _SlowOutsideOf(gym.make("CartPole-v1"), pid)


def test_bare_free_lets_its_worker_trail_by_at_most_lag_steps(no_leaks):
    lag = 3
    bare = BareParallel([functools.partial(_slow_in_workers, os.getpid())] * 4, 2, lag=lag)
    try:
        bare.reset(0)
        behind = []
        for _ in range(12):
            bare.step(np.zeros(4, dtype=np.int64))
            behind.append(bare.seq - int(bare.arrays.words[1][FINISHED]))
        assert max(behind) <= lag  # it waited once the worker was `lag` steps behind
        assert max(behind) > 0  # and not before: the slow worker was let trail
        bare.reset(1)  # waits for every step first, then for the reset
        assert int(bare.arrays.words[1][FINISHED]) == bare.seq
    finally:
        bare.close()
    assert bare.workers == []


def test_bare_first_ready_steps_each_sub_env_as_it_would_alone(no_leaks):
    # The first-ready reference does the same work per sub-env as a vectorizer: whatever the
    # order its sub-envs finish in, each one's trajectory is that of the env stepped alone
    # (same-step autoreset, seeded seed + index), two sub-envs per process. It runs until
    # every sub-env came back more than 5 times: a process that starts late (a loaded
    # machine) must not starve its sub-envs out of a fixed number of batches.
    from gymvec.bench.runners.bare_first_ready import BareFirstReady

    n, seed = 4, 5
    pool = BareFirstReady(make_env_fns("CartPole-v1", n), batch_size=2, num_workers=2)
    records: dict[int, list] = {i: [] for i in range(n)}
    actions: dict[int, list] = {i: [] for i in range(n)}
    rng = np.random.default_rng(0)
    try:
        pool.async_reset(seed)
        ids, obs, *_ = pool.recv()
        for _ in range(5000):
            if min(len(r) for r in records.values()) > 5:
                break
            for row, i in enumerate(ids.tolist()):
                records[i].append(obs[row].copy())
            chosen = rng.integers(0, 2, len(ids))
            for i, action in zip(ids.tolist(), chosen.tolist()):
                actions[i].append(action)
            pool.send(chosen, ids)
            ids, obs, *_ = pool.recv()
    finally:
        pool.close()
    for i in range(n):
        env = gym.make("CartPole-v1")
        expected = [env.reset(seed=seed + i)[0]]
        for action in actions[i][: len(records[i]) - 1]:
            step_obs, _, terminated, truncated, _ = env.step(action)
            expected.append(env.reset()[0] if terminated or truncated else step_obs)
        assert len(records[i]) > 5
        np.testing.assert_array_equal(np.array(records[i]), np.array(expected))


def test_bare_first_ready_raises_instead_of_hanging_when_a_process_dies(no_leaks):
    from gymvec.bench.runners.bare_first_ready import BareFirstReady

    pool = BareFirstReady(make_env_fns("CartPole-v1", 2), batch_size=2)
    try:
        pool.async_reset(0)
        ids = pool.recv()[0]
        process, _ = pool.workers[1]
        os.kill(process.pid, signal.SIGKILL)
        process.join(5)
        with pytest.raises(RuntimeError, match="bare-first-ready"):
            pool.send(np.zeros(2, dtype=np.int64), ids)
            pool.recv()
    finally:
        pool.close()


@pytest.mark.parametrize("copy_out", [True, False])
def test_bare_blocks_step_as_the_blocks_alone(copy_out, no_leaks):
    """bare-blocks' reference: one vector env (a block) per process, rows seeded seed + row;
    the batch handed out as copies, or (the blocks' runners) as views of the shared memory."""
    make = functools.partial(
        gym.make_vec, "CartPole-v1", 3, vectorization_mode="vector_entry_point"
    )
    bare = BareParallel([make, make], 2, block_rows=3, copy_out=copy_out)
    alone = [make(), make()]
    try:
        bare.reset(seed=4)
        np.testing.assert_array_equal(
            bare.arrays.obs, np.concatenate([alone[0].reset(seed=4)[0], alone[1].reset(seed=7)[0]])
        )
        rng = np.random.default_rng(0)
        for _ in range(40):
            actions = rng.integers(0, 2, 6)
            obs, rewards, terminated, truncated = bare.step(actions)
            assert np.shares_memory(obs, bare.arrays.obs) is not copy_out
            want = [alone[0].step(actions[:3]), alone[1].step(actions[3:])]
            np.testing.assert_array_equal(obs, np.concatenate([want[0][0], want[1][0]]))
            np.testing.assert_array_equal(terminated, np.concatenate([want[0][2], want[1][2]]))
    finally:
        bare.close()
