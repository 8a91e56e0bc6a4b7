"""SB3VecEnv: Stable-Baselines3's VecEnv semantics over a same-step gymnasium VectorEnv.

The reference is SB3's own DummyVecEnv run on the same envs with the same seeds and actions.
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
import warnings
from collections import OrderedDict

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorWrapper
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)
from stable_baselines3.common.vec_env.base_vec_env import tile_images

import gymvec
from gymvec.sb3 import SB3VecEnv, to_sb3


# Vectorizers with SyncVectorEnv's constructor (env_fns, autoreset_mode=...) whose sub-envs
# can be reached one by one (``apply`` or ``envs``). Add gymvec's own face here.
def _gymvec_parallel(env_fns, **kwargs):
    return gymvec.ParallelVectorEnv(env_fns, num_workers=2, context="fork", **kwargs)


_gymvec_parallel.__name__ = "gymvec.ParallelVectorEnv"

VECTORIZERS = [SyncVectorEnv, gymvec.SerialVectorEnv]
# Vectorizers running sub-envs in worker processes: only a few small tests use them.
PROCESS_VECTORIZERS = [AsyncVectorEnv, _gymvec_parallel]
ALL_VECTORIZERS = VECTORIZERS + PROCESS_VECTORIZERS


def make_sb3(vectorizer, env_fns, **kwargs) -> SB3VecEnv:
    return SB3VecEnv(vectorizer(env_fns, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs))


def name_of(vectorizer) -> str:
    return vectorizer.__name__


class SpaceEnv(gym.Env):
    """Observations sampled from ``space``; actions must lie in ``space`` too."""

    def __init__(self, space: spaces.Space, length: int = 4, render_mode: str | None = None):
        # Own copies: seeding one env's space must not seed another's.
        self.observation_space = copy.deepcopy(space)
        self.action_space = copy.deepcopy(space)
        self.length = length
        self.render_mode = render_mode
        self.current_step = 0
        self.fill = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.current_step = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.current_step += 1
        done = self.current_step >= self.length
        reward = float(self.np_random.random())
        return self.observation_space.sample(), reward, done, False, {}

    def render(self):
        if self.render_mode == "rgb_array":
            return np.full((4, 4, 3), self.fill, dtype=np.uint8)
        return None

    @staticmethod
    def custom_method(dim_0=1, dim_1=1):
        return np.ones((dim_0, dim_1))


class CountEnv(gym.Env):
    """Observation = steps taken; the episode ends after ``length`` steps with the given flags."""

    observation_space = spaces.Box(0, 100, shape=(1,), dtype=np.int64)
    action_space = spaces.Discrete(2)

    def __init__(self, length: int, terminate: bool = True, truncate: bool = False):
        self.length = length
        self.terminate = terminate
        self.truncate = truncate
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0]), {"reset_seed": -1 if seed is None else seed}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        info = {
            "t": self.t,
            "vec": np.array([self.t, 2 * self.t], dtype=np.float32),
            "nested": {"a": self.t, "tag": f"s{self.t}"},
        }
        if self.t % 2:
            info["odd"] = True
        if end:
            info["last"] = "yes"
        return np.array([self.t]), 1.0, end and self.terminate, end and self.truncate, info


def step_side_by_side(ours: VecEnv, ref: VecEnv, actions) -> tuple:
    """Step both envs with ``actions``, check every output matches, return ours."""
    out = ours.step(actions)
    expected = ref.step(actions)
    obs, rewards, dones, infos = out
    assert_same_obs(obs, expected[0])
    assert rewards.dtype == np.float32
    np.testing.assert_array_equal(rewards, expected[1])
    assert dones.dtype == np.bool_
    np.testing.assert_array_equal(dones, expected[2])
    np.testing.assert_equal(infos, expected[3])
    np.testing.assert_equal(ours.reset_infos, ref.reset_infos)
    return out


def assert_same_obs(obs, expected) -> None:
    assert type(obs) is type(expected)
    if isinstance(expected, dict):
        assert list(obs) == list(expected)
        for key in expected:
            assert_same_obs(obs[key], expected[key])
    elif isinstance(expected, tuple):
        assert len(obs) == len(expected)
        for part, expected_part in zip(obs, expected):
            assert_same_obs(part, expected_part)
    else:
        assert obs.dtype == expected.dtype
        np.testing.assert_array_equal(obs, expected)


def run_against_dummy(vectorizer, env_fns, steps: int, seed: int, as_list: bool) -> dict:
    """Run SB3VecEnv and DummyVecEnv side by side; count dones and truncations."""
    ours = make_sb3(vectorizer, env_fns)
    ref = DummyVecEnv(env_fns)
    ours.seed(seed)
    ref.seed(seed)
    assert_same_obs(ours.reset(), ref.reset())
    np.testing.assert_equal(ours.reset_infos, ref.reset_infos)
    action_space = ref.action_space
    action_space.seed(seed)
    counts = {"dones": 0, "truncations": 0}
    for _ in range(steps):
        actions = [action_space.sample() for _ in range(ref.num_envs)]
        _, _, dones, infos = step_side_by_side(ours, ref, actions if as_list else np.stack(actions))
        counts["dones"] += int(dones.sum())
        counts["truncations"] += sum(info["TimeLimit.truncated"] for info in infos)
        for done, info in zip(dones, infos):
            assert ("terminal_observation" in info) == done
    ours.close()
    ref.close()
    return counts


@pytest.mark.parametrize("vectorizer", ALL_VECTORIZERS, ids=name_of)
def test_cartpole_matches_dummy_vec_env(vectorizer):
    num_envs = 2 if vectorizer in PROCESS_VECTORIZERS else 3
    env_fns = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=20)] * num_envs
    counts = run_against_dummy(vectorizer, env_fns, steps=80, seed=3, as_list=False)
    # Both kinds of episode end happened, several times.
    assert counts["dones"] >= 4
    assert 0 < counts["truncations"] < counts["dones"]


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_pendulum_matches_dummy_vec_env(vectorizer):
    env_fns = [functools.partial(gym.make, "Pendulum-v1", max_episode_steps=7)] * 2
    counts = run_against_dummy(vectorizer, env_fns, steps=22, seed=11, as_list=False)
    assert counts["dones"] == counts["truncations"] == 6


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_infos_match_dummy_vec_env(vectorizer):
    # Scalars, arrays, strings, nested dicts, keys some steps lack, reset infos; episodes that
    # terminate, that are truncated, and that are both (not a time-limit truncation for SB3).
    env_fns = [
        functools.partial(CountEnv, 2),
        functools.partial(CountEnv, 3, terminate=False, truncate=True),
        functools.partial(CountEnv, 4, truncate=True),
    ]
    counts = run_against_dummy(vectorizer, env_fns, steps=7, seed=5, as_list=True)
    assert counts == {"dones": 6, "truncations": 2}


def test_finished_env_info_is_its_last_step_info():
    env = make_sb3(SyncVectorEnv, [functools.partial(CountEnv, 2), functools.partial(CountEnv, 5)])
    env.seed(7)
    env.reset()
    assert env.reset_infos == [{"reset_seed": 7}, {"reset_seed": 8}]
    env.step(np.zeros(2, dtype=np.int64))
    _, _, dones, infos = env.step(np.zeros(2, dtype=np.int64))
    assert dones.tolist() == [True, False]
    assert infos[0]["last"] == "yes" and infos[0]["t"] == 2
    assert infos[0]["nested"] == {"a": 2, "tag": "s2"}
    np.testing.assert_array_equal(infos[0]["terminal_observation"], [2])
    assert infos[0]["TimeLimit.truncated"] is False
    assert env.reset_infos[0] == {"reset_seed": -1}
    assert "last" not in infos[1] and "odd" not in infos[1]
    assert infos[1]["t"] == 2 and "terminal_observation" not in infos[1]


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_observations_are_owned_by_the_caller(vectorizer):
    # With copy=False the vector env reuses its buffers; SB3 keeps the previous observation.
    env_fns = [functools.partial(CountEnv, 5)] * 2
    env = make_sb3(vectorizer, env_fns, copy=False)
    first = env.reset()
    second = env.step(np.zeros(2, dtype=np.int64))[0]
    env.step(np.zeros(2, dtype=np.int64))
    np.testing.assert_array_equal(first, [[0], [0]])
    np.testing.assert_array_equal(second, [[1], [1]])
    env.close()


STRUCTURED_PARTS = OrderedDict(
    [
        ("discrete", spaces.Discrete(3, start=1)),
        ("multidiscrete", spaces.MultiDiscrete([2, 3])),
        ("multibinary", spaces.MultiBinary(3)),
        ("box", spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)),
    ]
)


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
@pytest.mark.parametrize(
    "space",
    [spaces.Dict(STRUCTURED_PARTS), spaces.Tuple(tuple(STRUCTURED_PARTS.values()))],
    ids=["dict", "tuple"],
)
def test_structured_spaces_with_list_actions_match_dummy(vectorizer, space):
    # Actions are a python list of one Dict/Tuple sample per env; SpaceEnv rejects bad ones.
    env_fns = [functools.partial(SpaceEnv, space, length=3)] * 3
    counts = run_against_dummy(vectorizer, env_fns, steps=7, seed=2, as_list=True)
    assert counts["dones"] == 6


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_dict_space_obs_and_batched_actions(vectorizer):
    space = spaces.Dict(STRUCTURED_PARTS)
    env = make_sb3(vectorizer, [functools.partial(SpaceEnv, space, length=2)] * 3)
    obs = env.reset()
    assert isinstance(obs, OrderedDict) and list(obs) == list(STRUCTURED_PARTS)
    # gymnasium's batched layout (a dict of arrays) is accepted as well.
    batched = {
        "discrete": np.array([1, 2, 3]),
        "multidiscrete": np.array([[0, 0], [1, 2], [1, 1]]),
        "multibinary": np.ones((3, 3), dtype=np.int8),
        "box": np.full((3, 2), 0.5, dtype=np.float32),
    }
    for _ in range(2):
        obs, _, dones, infos = env.step(batched)
    assert dones.all()
    for key, part in STRUCTURED_PARTS.items():
        assert obs[key].shape[0] == 3
        assert all(part.contains(value) for value in obs[key])
        assert all(part.contains(info["terminal_observation"][key]) for info in infos)
    with pytest.raises(ValueError, match="one action per env"):
        env.step([space.sample()] * 2)
    env.close()


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
@pytest.mark.parametrize("space", list(STRUCTURED_PARTS.values()), ids=list(STRUCTURED_PARTS))
def test_single_spaces(vectorizer, space):
    env = make_sb3(vectorizer, [functools.partial(SpaceEnv, space, length=2)] * 3)
    assert env.observation_space == space and env.action_space == space
    obs = env.reset()
    for _ in range(2):
        assert obs.shape == (3, *space.shape) and obs.dtype == space.dtype
        assert all(space.contains(value) for value in obs)
        obs, _, dones, _ = env.step([space.sample() for _ in range(3)])
    assert dones.all()
    env.close()


@pytest.mark.parametrize("wrapper", [None, VecNormalize, VecFrameStack])
@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_terminal_observation_under_vec_wrappers(vectorizer, wrapper):
    lengths = [2, 3, 4]
    env = make_sb3(vectorizer, [functools.partial(CountEnv, n) for n in lengths])
    if wrapper is VecFrameStack:
        env = VecFrameStack(env, n_stack=2)
    elif wrapper is VecNormalize:
        env = VecNormalize(env)
    previous = env.reset()
    ends = 0
    for step in range(1, 9):
        obs, _, dones, infos = env.step(np.zeros(3, dtype=np.int64))
        for i, length in enumerate(lengths):
            assert dones[i] == (step % length == 0)
            if not dones[i]:
                assert "terminal_observation" not in infos[i]
                continue
            ends += 1
            terminal = infos[i]["terminal_observation"]
            assert terminal.shape == obs[i].shape
            # The episode's last observation counts one more step than the one before it;
            # the new episode starts lower. Orderings survive VecNormalize's scaling.
            assert np.all(terminal > previous[i])
            assert np.all(obs[i] <= previous[i]) and np.any(obs[i] < previous[i])
            if wrapper is not VecNormalize:
                np.testing.assert_array_equal(terminal[-1:], [length])
                np.testing.assert_array_equal(obs[i], np.zeros_like(obs[i]))
        previous = obs
    assert ends == 4 + 2 + 2
    env.close()


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_vec_monitor_reports_the_same_episodes_as_dummy(vectorizer):
    env_fns = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=15)] * 2
    ours = VecMonitor(make_sb3(vectorizer, env_fns))
    ref = VecMonitor(DummyVecEnv(env_fns))
    ours.seed(0)
    ref.seed(0)
    ours.reset()
    ref.reset()
    actions = np.random.default_rng(0).integers(0, 2, size=(40, 2))
    episodes, expected = [], []
    for action in actions:
        _, _, dones, infos = ours.step(action)
        _, _, _, ref_infos = ref.step(action)
        for done, info, ref_info in zip(dones, infos, ref_infos):
            assert ("episode" in info) == done
            if done:
                episodes.append((info["episode"]["r"], info["episode"]["l"]))
                expected.append((ref_info["episode"]["r"], ref_info["episode"]["l"]))
    assert len(episodes) >= 3 and episodes == expected


N_CALL_ENVS = 3


def check_per_env_access(env: VecEnv) -> None:
    """env_method, get_attr and set_attr on all envs and on subsets, negative indices too."""
    assert env.env_method("custom_method", 1, indices=None, dim_1=2)[0].shape == (1, 2)
    subset = env.env_method("custom_method", 1, indices=[0, 2], dim_1=3)
    assert len(subset) == 2 and all((result == np.ones((1, 3))).all() for result in subset)
    for i in range(N_CALL_ENVS):
        assert env.set_attr("current_step", i, indices=i) is None
    assert env.get_attr("current_step") == [0, 1, 2]
    env.set_attr("current_step", 42)
    assert env.get_attr("current_step") == [42] * N_CALL_ENVS
    env.reset()
    env.set_attr("current_step", 12, indices=[0, -1])
    assert env.get_attr("current_step") == [12, 0, 12]
    assert env.get_attr("current_step", indices=[-1, 1]) == [12, 0]
    assert env.get_attr("length", indices=1) == [4]
    # A list value goes whole to each selected env, not spread over them.
    env.set_attr("fill", [1, 2], indices=[1])
    assert env.get_attr("fill") == [0, [1, 2], 0]
    assert env.has_attr("custom_method") and not env.has_attr("no_such_attribute")
    with pytest.raises(AttributeError):
        env.get_attr("no_such_attribute")
    with pytest.raises(IndexError, match="out of range"):
        env.get_attr("length", indices=[N_CALL_ENVS])


@pytest.mark.parametrize("wrapper", [None, VecFrameStack, VecNormalize])
@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_env_method_get_attr_set_attr(vectorizer, wrapper):
    env_fns = [functools.partial(SpaceEnv, spaces.Box(0, 1, (2,), np.float32))] * N_CALL_ENVS
    env = make_sb3(vectorizer, env_fns)
    if wrapper is VecFrameStack:
        env = VecFrameStack(env, n_stack=2)
    elif wrapper is VecNormalize:
        env = VecNormalize(env)
    env.seed(0)
    check_per_env_access(env)
    env.close()


def test_vector_wrappers_are_looked_through():
    sync = SyncVectorEnv(
        [functools.partial(SpaceEnv, spaces.Discrete(2))] * N_CALL_ENVS,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    env = SB3VecEnv(VectorWrapper(sync))
    check_per_env_access(env)
    assert sync.envs[2].get_wrapper_attr("current_step") == 12
    env.close()


class ApplyVectorEnv(SyncVectorEnv):
    """A vector env with gymvec's ``apply``; it runs a cloudpickled copy of each function."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.applied = []

    def apply(self, fn, *args, indices=None, **kwargs):
        fn, args, kwargs = cloudpickle.loads(cloudpickle.dumps((fn, args, kwargs)))
        indices = range(self.num_envs) if indices is None else indices
        self.applied.append((fn.__name__, list(indices)))
        return tuple(fn(self.envs[i], *args, **kwargs) for i in indices)


def test_per_env_access_goes_through_apply():
    env_fns = [functools.partial(SpaceEnv, spaces.Discrete(2), render_mode="rgb_array")]
    env_fns += [functools.partial(lambda: Monitor(SpaceEnv(spaces.Discrete(2), 4, "rgb_array")))]
    env_fns *= 2
    vector_env = ApplyVectorEnv(env_fns[:N_CALL_ENVS], autoreset_mode=AutoresetMode.SAME_STEP)
    env = SB3VecEnv(vector_env)
    assert env.render_mode == "rgb_array"  # read through apply by VecEnv.__init__
    vector_env.applied.clear()
    check_per_env_access(env)
    assert env.env_is_wrapped(Monitor) == [False, True, False]
    assert env.env_is_wrapped(Monitor, indices=[1]) == [True]
    env.set_attr("fill", 7)
    assert [image.max() for image in env.get_images()] == [7] * N_CALL_ENVS
    assert vector_env.applied[:2] == [("call_method", [0, 1, 2]), ("call_method", [0, 2])]
    assert ("set_attr", [2]) in vector_env.applied
    assert ("is_wrapped", [1]) in vector_env.applied
    assert vector_env.applied[-1] == ("call_method", [0, 1, 2])  # get_images renders
    env.close()


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_env_is_wrapped(vectorizer):
    def make_env():
        return SpaceEnv(STRUCTURED_PARTS["box"])

    def make_monitored_env():
        return Monitor(SpaceEnv(STRUCTURED_PARTS["box"]))

    env = make_sb3(vectorizer, [make_env, make_monitored_env])
    assert env.env_is_wrapped(Monitor) == [False, True]
    assert env.env_is_wrapped(gym.Wrapper, indices=[-1]) == [True]
    assert VecFrameStack(env, n_stack=2).env_is_wrapped(Monitor) == [False, True]
    env.close()


def test_process_vector_env_without_per_env_access():
    # AsyncVectorEnv reaches all sub-envs at once only: reads work, a partial write cannot.
    env_fns = [functools.partial(SpaceEnv, spaces.Discrete(2), render_mode="rgb_array")] * 2
    env = make_sb3(AsyncVectorEnv, env_fns)
    assert env.render_mode == "rgb_array"
    env.reset()
    results = env.env_method("custom_method", 2, indices=[1])
    assert len(results) == 1 and results[0].shape == (2, 1)
    env.set_attr("current_step", 5)
    assert env.get_attr("current_step", indices=-1) == [5]
    env.set_attr("fill", 9)
    assert [image.max() for image in env.get_images()] == [9, 9]
    with pytest.raises(NotImplementedError, match="only set an attribute on all"):
        env.set_attr("current_step", 1, indices=[0])
    with pytest.raises(NotImplementedError, match="env_is_wrapped"):
        env.env_is_wrapped(Monitor)
    env.close()


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_get_images_and_render_match_dummy(vectorizer):
    env_fns = [functools.partial(SpaceEnv, spaces.Discrete(2), render_mode="rgb_array")] * 3
    ours = make_sb3(vectorizer, env_fns)
    ref = DummyVecEnv(env_fns)
    for env in (ours, ref):
        for i in range(3):
            env.set_attr("fill", 10 * (i + 1), indices=i)
    images = ours.get_images()
    assert [image.max() for image in images] == [10, 20, 30]
    np.testing.assert_array_equal(ours.render(), tile_images(images))
    np.testing.assert_array_equal(ours.render(mode="rgb_array"), ref.render(mode="rgb_array"))
    assert ours.metadata["render_modes"] == ref.metadata["render_modes"]
    ours.close()


def test_get_images_without_rgb_array_render_mode():
    env = make_sb3(SyncVectorEnv, [functools.partial(SpaceEnv, spaces.Discrete(2))] * 2)
    assert env.render_mode is None
    with pytest.warns(UserWarning, match="rgb_array"):
        assert env.get_images() == [None, None]
    with pytest.warns(UserWarning):
        assert env.render() is None


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_seed_reproducibility(vectorizer):
    env = make_sb3(vectorizer, [functools.partial(gym.make, "Pendulum-v1")] * 3)
    actions = np.random.default_rng(0).uniform(-2, 2, size=(5, 3, 1)).astype(np.float32)

    def rollout(seed):
        assert env.seed(seed) == [seed, seed + 1, seed + 2]
        observations = [env.reset()]
        assert env._seeds == [None] * 3  # consumed by the reset
        observations += [env.step(action)[0] for action in actions]
        return np.stack(observations)

    first = rollout(4)
    np.testing.assert_array_equal(rollout(4), first)
    assert not np.allclose(rollout(5), first)
    # An unseeded reset does not replay the seeded one.
    assert not np.allclose(env.reset(), first[0])
    # seed() without an argument still gives each env its own seed.
    seeds = env.seed()
    assert len(set(seeds)) == 3
    obs = env.reset()
    assert not np.allclose(obs[0], obs[1]) and not np.allclose(obs[1], obs[2])
    env.close()


@pytest.mark.parametrize("vectorizer", VECTORIZERS, ids=name_of)
def test_reset_options(vectorizer):
    env = make_sb3(vectorizer, [functools.partial(gym.make, "CartPole-v1")] * 2)
    env.set_options({"low": 0.2, "high": 0.3})
    obs = env.reset()
    assert np.all((obs >= 0.2) & (obs <= 0.3))
    assert env._options == [{}, {}]  # consumed by the reset
    assert np.all(np.abs(env.reset()) <= 0.05)  # CartPole's default bounds again
    env.close()


@pytest.mark.parametrize("vectorizer", ALL_VECTORIZERS, ids=name_of)
def test_per_env_reset_options_equal_dummy_vec_env(vectorizer):
    """A vector env resets with one options dict: different ones per env take one masked
    reset each, and observations and reset infos equal DummyVecEnv's."""
    env_fns = [functools.partial(gym.make, "CartPole-v1")] * 3
    env, ref = make_sb3(vectorizer, env_fns), DummyVecEnv(env_fns)
    options = [{"low": 0.2, "high": 0.3}, {}, {"low": -0.3, "high": -0.2}]
    for vec_env in (env, ref):
        vec_env.seed(7)
        vec_env.set_options(options)
    obs, expected = env.reset(), ref.reset()
    np.testing.assert_array_equal(obs, expected)
    assert np.all((obs[0] >= 0.2) & (obs[0] <= 0.3)) and np.all(np.abs(obs[1]) <= 0.05)
    assert np.all((obs[2] >= -0.3) & (obs[2] <= -0.2))
    assert env.reset_infos == ref.reset_infos
    for _ in range(3):
        actions = np.array([0, 1, 0])
        for got, want in zip(env.step(actions), ref.step(actions)):
            np.testing.assert_equal(got, want)
    env.close()
    ref.close()


def test_envs_are_the_sub_envs_where_they_live_here():
    env_fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    env = make_sb3(gymvec.SerialVectorEnv, env_fns)
    env.set_attr("dummy", 12)
    assert [sub_env.dummy for sub_env in env.envs] == [12, 12]  # as DummyVecEnv.envs
    env.close()
    env = make_sb3(_gymvec_parallel, env_fns)
    with pytest.raises(AttributeError, match="runs its sub-envs elsewhere"):
        _ = env.envs
    env.close()


def test_rejects_other_autoreset_modes_and_other_types():
    env_fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED):
        vector_env = SyncVectorEnv(env_fns, autoreset_mode=mode)
        with pytest.raises(ValueError, match=r"SAME_STEP.*autoreset_mode=") as error:
            SB3VecEnv(vector_env)
        assert repr(mode) in str(error.value)
        vector_env.close()
    single = gym.make("CartPole-v1")
    with pytest.raises(TypeError, match="DummyVecEnv"):
        to_sb3(single)


def test_batched_env_is_converted_with_to_gymnasium():
    class Batched:
        """Stands in for gymvec's batched envs."""

        requested = []

        def to_gymnasium(self, autoreset_mode="next_step"):
            self.requested.append(autoreset_mode)
            return SyncVectorEnv(
                [functools.partial(gym.make, "CartPole-v1")] * 2,
                autoreset_mode=AutoresetMode(
                    {"same_step": "SameStep", "next_step": "NextStep"}[autoreset_mode]
                ),
            )

    env = to_sb3(Batched())
    assert isinstance(env, SB3VecEnv) and Batched.requested == ["same_step"]
    assert env.reset().shape == (2, 4)
    env.close()


def test_ppo_learns_without_error():
    env_fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    env = VecMonitor(make_sb3(SyncVectorEnv, env_fns))
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=64,
        batch_size=128,
        n_epochs=1,
        policy_kwargs={"net_arch": [16]},
        seed=0,
        device="cpu",
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3 would make a dir in /tmp
    model.learn(total_timesteps=256)
    assert model.num_timesteps == 256
    assert len(model.ep_info_buffer) > 0
    env.close()


def test_import_error_without_stable_baselines3(monkeypatch):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    monkeypatch.delitem(sys.modules, "gymvec.sb3", raising=False)
    with warnings.catch_warnings(), pytest.raises(ImportError) as error:
        importlib.import_module("gymvec.sb3")
    assert "stable-baselines3 is not installed: pip install stable-baselines3" in str(error.value)
