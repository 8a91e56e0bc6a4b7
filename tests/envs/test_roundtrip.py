"""gymnasium vector env -> GymVectorEnvWrapper -> GymnasiumVectorEnv steps exactly like the
original, in each autoreset mode, for Sync and for a native vector env."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gymvec import GymnasiumVectorEnv, GymVectorEnvWrapper


def _make(env_id):
    return lambda: gym.make(env_id, max_episode_steps=25)


def step_both(original, face, seed: int, steps: int, after_step=None) -> int:
    """Reset both with ``seed``, step both with the same actions and assert equal observations,
    rewards and flags; ``after_step(a, b, finished)`` checks more. Returns the episode ends."""
    obs_a, _ = original.reset(seed=seed)
    obs_b, _ = face.reset(seed=seed)
    np.testing.assert_array_equal(obs_a, obs_b)
    ends = 0
    for _ in range(steps):
        actions = original.action_space.sample()
        a = original.step(actions)
        b = face.step(actions)
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
        finished = a[2] | a[3]
        if after_step is not None:
            after_step(a, b, finished)
        ends += finished.sum()
    return ends


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_round_trip_steps_like_the_original(env_id, mode):
    fns = [_make(env_id)] * 3
    original = SyncVectorEnv(fns, autoreset_mode=mode)
    inner = SyncVectorEnv(fns, autoreset_mode=mode)
    wrapper = GymVectorEnvWrapper(inner, reward_dtype=torch.float64)
    face = GymnasiumVectorEnv(wrapper, autoreset_mode=mode)

    def after_step(a, b, finished):
        for x, y in zip(a[:4], b[:4]):
            assert x.dtype == y.dtype
        if mode == AutoresetMode.SAME_STEP and finished.any():
            for i in np.flatnonzero(finished):
                np.testing.assert_array_equal(a[4]["final_obs"][i], b[4]["final_obs"][i])
        if mode == AutoresetMode.DISABLED and finished.any():
            obs_a, _ = original.reset(options={"reset_mask": finished})
            obs_b, _ = face.reset(options={"reset_mask": finished.copy()})
            np.testing.assert_array_equal(obs_a, obs_b)

    try:
        assert face.single_observation_space == original.single_observation_space
        assert face.action_space == original.action_space
        assert step_both(original, face, seed=7, steps=80, after_step=after_step) >= 3
    finally:
        original.close()
        face.close()


def test_round_trip_of_a_native_next_step_vector_env():
    # CartPoleVectorEnv: one generator for all sub-envs, no reset_mask, NEXT_STEP autoreset
    def native():
        return gym.make_vec("CartPole-v1", 3, vectorization_mode="vector_entry_point")

    original = native()
    face = GymnasiumVectorEnv(GymVectorEnvWrapper(native(), reward_dtype=torch.float64))
    try:
        assert step_both(original, face, seed=1, steps=250) >= 3
    finally:
        original.close()
        face.close()


def test_next_step_over_an_env_without_partial_steps_is_refused_clearly():
    inner = SyncVectorEnv([_make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    face = GymnasiumVectorEnv(GymVectorEnvWrapper(inner), autoreset_mode="next_step")
    try:
        face.reset(seed=0)
        finished = False
        for _ in range(60):
            try:
                _, _, term, trunc, _ = face.step(face.action_space.sample())
            except NotImplementedError as exc:
                assert "same_step" in str(exc)
                finished = True
                break
        assert finished
    finally:
        face.close()


class _CountingEnv(gym.Env):
    """uint16 observations (torch has no masked writes for them); a settable ``scale``."""

    observation_space = gym.spaces.Box(0, 1000, shape=(2,), dtype=np.uint16)
    action_space = gym.spaces.Discrete(3)

    def __init__(self):
        self.scale = 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.uint16), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, self.scale * int(action)], dtype=np.uint16)
        return obs, 1.0, self.t >= 3, False, {}


def test_round_trip_has_the_originals_spaces_calls_and_uint16_observations():
    """The face over a wrapped vector env takes its single spaces (random generators included:
    equal seeds, equal samples), reaches its sub-envs through call/set_attr, and copies rows
    of any dtype."""
    fns = [_CountingEnv] * 2
    for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED):
        original = SyncVectorEnv(fns, autoreset_mode=mode)
        inner = SyncVectorEnv(fns, autoreset_mode=mode)
        face = GymnasiumVectorEnv(GymVectorEnvWrapper(inner), autoreset_mode=mode)
        assert face.single_action_space is inner.single_action_space
        original.action_space.seed(3)
        face.action_space.seed(3)
        np.testing.assert_array_equal(face.action_space.sample(), original.action_space.sample())
        for env in (original, face):
            env.set_attr("scale", [10, 20])
        assert face.get_attr("scale") == original.get_attr("scale") == (10, 20)
        assert face.call("reset", seed=1)[0][0].dtype == np.uint16
        obs_a, _ = original.reset(seed=0)
        obs_b, _ = face.reset(seed=0)
        np.testing.assert_array_equal(obs_b, obs_a)
        for _ in range(2):
            actions = np.array([1, 2])
            a, b = original.step(actions), face.step(actions)
            for x, y in zip(a[:4], b[:4]):
                np.testing.assert_array_equal(y, x)
                assert y.dtype == x.dtype
        if mode == AutoresetMode.DISABLED:  # a masked reset writes some rows only
            mask = np.array([True, False])
            obs_a, _ = original.reset(options={"reset_mask": mask})
            obs_b, _ = face.reset(options={"reset_mask": mask.copy()})
            np.testing.assert_array_equal(obs_b, obs_a)
        face.close()
        original.close()


def _round_trip_face(env_fns, autoreset_mode):
    inner = SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
    wrapper = GymVectorEnvWrapper(inner, reward_dtype=torch.float64)
    return GymnasiumVectorEnv(wrapper, autoreset_mode=autoreset_mode)


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_round_trip_infos_equal_the_originals(mode):
    """Every kind of info value (strings, nested dicts, numpy scalars, keys at some steps
    only) comes back as the original vector env laid it out, with its types; so do SAME_STEP's
    final observations, as the sub-envs returned them."""
    import functools

    import _face_envs as fe

    fns = [functools.partial(fe.make_rich, tag) for tag in range(3)]
    ends = fe.run_against_sync(_round_trip_face, fns, mode, steps=30, partial_every=7)
    assert ends.sum() >= 3


def test_unbatch_info_inverts_gymnasiums_add_info():
    """Per-sub-env infos batched by gymnasium and unbatched give the same batch again."""
    from gymvec.vector.tensordict_engine import unbatch_info

    vector = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    per_env = [
        {"a": 1, "flag": True, "name": "x", "nested": {"v": 1.5}},
        {},
        {"a": 3, "np_flag": np.bool_(False), "arr": np.ones(2, np.float32), "nested": {}},
    ]
    batched: dict = {}
    for i, info in enumerate(per_env):
        batched = vector._add_info(batched, info, i)
    unbatched = unbatch_info(batched, 3)
    assert unbatched[1] == {} and unbatched[0]["nested"] == {"v": 1.5}
    assert type(unbatched[0]["flag"]) is bool and type(unbatched[2]["np_flag"]) is np.bool_
    again: dict = {}
    for i, info in enumerate(unbatched):
        again = vector._add_info(again, info, i)
    import _face_envs as fe

    fe.assert_same(again, batched)
    vector.close()


def test_vector_env_wrapper_passes_reset_options():
    import functools

    import _face_envs as fe

    wrapper = GymVectorEnvWrapper(SyncVectorEnv([functools.partial(fe.make_rich, 0)] * 2))
    wrapper.set_reset_options({"level": 3})
    wrapper.reset()
    assert wrapper.last_reset_info["options_seen"].tolist() == [["level"], ["level"]]
    wrapper.reset()  # options are for one reset
    assert "options_seen" not in wrapper.last_reset_info
    wrapper.set_reset_options({"level": 4})
    from tensordict import TensorDict

    mask = torch.tensor([[False], [True]])
    wrapper.reset(TensorDict({"_reset": mask}, batch_size=[2]))
    seen = wrapper.last_reset_info
    assert seen["_options_seen"].tolist() == [False, True]
    assert seen["options_seen"][1] == ["level"]  # SyncVectorEnv pops "reset_mask"
    wrapper.close()
