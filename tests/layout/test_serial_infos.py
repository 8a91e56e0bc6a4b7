"""The serial path's infos where an entry is an int after a reset and a float after a step
(FrozenLake's "prob"): a float field holds the steps' values, and every batch equals
``SyncVectorEnv``'s, its dtype included (gymnasium types it after sub-env 0's value)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gymvec import ParallelVectorEnv, SerialVectorEnv


class _IntThenFloat(gym.Env):
    """Info "v": an int after a reset, a float after a step, and now and then an int that no
    float64 holds exactly (it travels beside the buffers)."""

    observation_space = gym.spaces.Discrete(5)
    action_space = gym.spaces.Discrete(3)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(3))
        return self.t, {"v": 7 + self.t}

    def step(self, action):
        self.t += 1
        big = self.t % 4 == 3
        v = 2**60 + int(action) if big else self.t * 0.75 + int(action)
        return self.t % 5, 1.0, self.t >= 4 + int(action), False, {"v": v}


def _assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, dict):
            _assert_same(got[key], value)
        elif value.dtype == object:
            assert len(got[key]) == len(value)
        else:
            assert got[key].dtype == value.dtype, key
            np.testing.assert_array_equal(got[key], value, err_msg=key)


def _face(fns: list, mode: AutoresetMode = AutoresetMode.NEXT_STEP, parallel: bool = False):
    if parallel:
        return ParallelVectorEnv(fns, num_workers=2, local_worker=True, autoreset_mode=mode)
    return SerialVectorEnv(fns, autoreset_mode=mode)


def _steps_as_sync(envs, ref, seed: int, steps: int) -> list[dict]:
    """Both reset with ``seed``, then ``steps`` random steps: every batch's observations and
    infos equal Sync's, dtypes included. Returns Sync's step infos."""
    _assert_same(envs.reset(seed=seed)[1], ref.reset(seed=seed)[1])
    ref.action_space.seed(seed)
    infos = []
    for _ in range(steps):
        actions = ref.action_space.sample()
        got, want = envs.step(actions), ref.step(actions)
        np.testing.assert_array_equal(got[0], want[0])
        _assert_same(got[4], want[4])
        infos.append(want[4])
    return infos


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("parallel", [False, True])
def test_int_then_float_entry_gets_a_float_field_and_sync_infos(mode, parallel):
    fns = [lambda: gym.make("FrozenLake-v1")] * 4
    ref, envs = SyncVectorEnv(fns, autoreset_mode=mode), _face(fns, mode, parallel)
    try:
        dtypes = {infos["prob"].dtype for infos in _steps_as_sync(envs, ref, 5, 150)}
        # both of gymnasium's typings came up (a reset in sub-env 0, and a step there)
        if mode == AutoresetMode.NEXT_STEP:
            assert dtypes == {np.dtype(np.int64), np.dtype(np.float64)}
        field = envs.engine.layout.info_fields["prob"]
        assert field.kind is float and field.dtype == np.float64 and field.ints
    finally:
        envs.close()
        ref.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("parallel", [False, True])
def test_ints_in_a_float_field_and_ints_beside_it_give_sync_infos(mode, parallel):
    fns = [_IntThenFloat] * 4
    ref, envs = SyncVectorEnv(fns, autoreset_mode=mode), _face(fns, mode, parallel)
    try:
        dtypes = {infos["v"].dtype for infos in _steps_as_sync(envs, ref, 3, 120)}
        assert dtypes == {np.dtype(np.int64), np.dtype(np.float64)}
        assert envs.engine.layout.info_fields["v"].ints
    finally:
        envs.close()
        ref.close()


class _VaryingKeys(gym.Env):
    """Info keys that change from step to step: "a" (a float) mostly, "b" too now and then,
    neither at times."""

    observation_space = gym.spaces.Discrete(7)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(7))
        return self.t % 7, {"a": 0.5}

    def step(self, action):
        self.t += 1 + int(action)
        info: dict = {} if self.t % 5 == 0 else {"a": self.t * 0.5}
        if self.t % 3 == 0:
            info["b"] = float(self.t)
        return self.t % 7, float(action), self.t % 13 == 0, False, info


def test_info_keys_that_vary_between_sub_envs_and_steps_give_sync_infos():
    """Each sub-env's info written column by column where they all hold the same fields, and
    one by one where they do not: the batches (their masks included) equal SyncVectorEnv's
    either way."""
    fns = [_VaryingKeys] * 4
    ref, envs = SyncVectorEnv(fns), _face(fns)
    try:
        _steps_as_sync(envs, ref, 2, 120)
    finally:
        envs.close()
        ref.close()
