"""gymnasium envs, env factories and comparison helpers for the tests of the gymnasium face.

Factories live at module level so that worker processes (spawn included) import them by
reference. This module does not import torch: spawned workers that build bare gymnasium envs
start fast.
"""

from __future__ import annotations

import copy
import functools
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

RICH_ENV_ID = "GymvecFaceTest/RichInfo-v0"


class RichInfoEnv(gym.Env):
    """Short episodes of a seeded random length, with every kind of info value gymnasium's
    ``_add_info`` distinguishes.

    Infos hold Python ints, floats and bools, numpy scalars (``np.float32``, ``np.int16`` and
    ``np.bool_``, which gymnasium stores in an object array), fixed-shape arrays, strings,
    lists, ``None``, nested dicts, keys present only at some steps, only at an episode's end,
    only at reset, only in sub-envs with an odd ``tag``, and a key whose type changes within
    an episode (an int first, a float later).
    """

    observation_space = spaces.Box(-100.0, 100.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self, tag: int = 0, max_length: int = 5):
        self.tag = tag
        self.max_length = max_length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(2, self.max_length + 1))
        self.position = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        info = self._common()
        info["reset_only"] = "fresh"
        info["reset_number"] = np.float32(self.length)
        if options:
            info["options_seen"] = sorted(options)
        return self.position.copy(), info

    def step(self, action):
        self.t += 1
        self.position = (self.position + np.float32(int(action) - 1)).astype(np.float32)
        terminated = self.t >= self.length and int(action) == 2
        truncated = not terminated and self.t >= self.length + 1
        reward = float(self.position.sum()) + 0.25 * self.t
        info = self._common()
        info["step_name"] = f"step-{self.t}"
        info["changing"] = self.t if self.t < 3 else self.t + 0.5
        if self.t % 3 == 0:
            info["every_third"] = np.float32(self.t)
        if terminated or truncated:
            info["at_end"] = {"score": reward, "why": "terminated" if terminated else "truncated"}
        return self.position.copy(), reward, terminated, truncated, info

    def _common(self) -> dict:
        info = {
            "t": self.t,
            "speed": float(np.abs(self.position).sum()),
            "even": self.t % 2 == 0,
            "half": np.float32(self.t / 2),
            "small": np.int16(self.t),
            "np_flag": np.bool_(self.t % 2 == 1),
            "vector": np.array([self.t, -self.t], dtype=np.float64),
            "items": [self.t, "x"],
            "nothing": None,
            "nested": {"depth": self.t, "inner": {"value": float(self.t) * 1.5}},
        }
        if self.t % 2 == 0:
            info["nested"]["sometimes"] = np.array([self.t], dtype=np.int32)
        if self.tag % 2:
            info["odd_only"] = self.tag
        return info


gym.register(RICH_ENV_ID, entry_point=RichInfoEnv)


class SlowEnv(gym.Env):
    """Sleeps ``action`` seconds in ``step`` and ``reset_delay`` in reset.

    The action space's small bound keeps random actions (gymvec's info probe) fast; larger
    actions are accepted.
    """

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(0.0, 0.01, shape=(), dtype=np.float32)

    def __init__(self, reset_delay: float = 0.0):
        self.reset_delay = reset_delay
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        time.sleep(self.reset_delay)
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        time.sleep(float(action))
        self.t += 1
        return np.full(1, self.t / 100, dtype=np.float32), 1.0, False, False, {}


class RaisingEnv(gym.Env):
    """Raises in ``step`` when an action of 1 arrives after the first step (gymvec's info
    probe steps a fresh env once, with a random action)."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        if int(action) == 1 and self.t > 1:
            raise ValueError(f"step failed on purpose with action {int(action)}")
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}


class BoundsEnv(gym.Env):
    """A Box observation whose bounds (not shape or dtype) depend on ``high``."""

    action_space = spaces.Discrete(2)

    def __init__(self, high: float = 1.0, size: int = 3):
        self.observation_space = spaces.Box(-high, high, shape=(size,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._sample(), {}

    def step(self, action):
        return self._sample(), 0.0, False, False, {}

    def _sample(self):
        return self.np_random.uniform(-1, 1, self.observation_space.shape).astype(np.float32)


# ---- factories --------------------------------------------------------------------------------
def make(env_id: str, **kwargs) -> gym.Env:
    return gym.make(env_id, **kwargs)


def make_rich(tag: int = 0) -> gym.Env:
    return RichInfoEnv(tag=tag)


def make_with_stats(env_id: str, **kwargs) -> gym.Env:
    """``RecordEpisodeStatistics`` inside the factory, as CleanRL does."""
    return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id, **kwargs))


def make_slow(reset_delay: float = 0.0) -> gym.Env:
    return SlowEnv(reset_delay)


def make_raising() -> gym.Env:
    return RaisingEnv()


def make_bounds(high: float = 1.0, size: int = 3) -> gym.Env:
    return BoundsEnv(high, size)


def env_fns(env_id: str, n: int, lengths: tuple[int, ...] | None = None, **kwargs) -> list:
    """``n`` factories for ``env_id``; ``lengths`` gives each its own ``max_episode_steps``
    so that sub-envs finish at different steps."""
    if lengths is None:
        return [functools.partial(make, env_id, **kwargs) for _ in range(n)]
    return [
        functools.partial(make, env_id, max_episode_steps=lengths[i], **kwargs) for i in range(n)
    ]


def sub_env_pid(env) -> int:
    """For ``apply``: the process a sub-env lives in."""
    import os

    return os.getpid()


def sub_env_gravity_times(env, factor: float) -> float:
    return env.unwrapped.gravity * factor


class SpacesEnv(gym.Env):
    """Observations and actions of any given spaces; episodes end after ``length`` steps.

    Observations are samples of the observation space (seeded by ``reset``); rewards count
    the steps.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, length=3):
        # copies: the sub-envs must not share the spaces' random generators
        self.observation_space = copy.deepcopy(observation_space)
        self.action_space = copy.deepcopy(action_space)
        self.length = length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        if action not in self.action_space:
            raise ValueError(f"action {action!r} not in {self.action_space}")
        self.t += 1
        return self.observation_space.sample(), float(self.t), self.t >= self.length, False, {}


class CustomSpace(spaces.Space):
    """A space of any string (no shape, no dtype), as gymnasium's tests define one."""

    def sample(self, mask=None, probability=None):
        return self.np_random.integers(0, 10, ()).__str__()

    def contains(self, x):
        return isinstance(x, str)

    def __eq__(self, other):
        return isinstance(other, CustomSpace)


class CustomSpaceEnv(gym.Env):
    """Observes "reset", then "step(<action>)"; the actions are strings."""

    def __init__(self):
        self.observation_space = CustomSpace()
        self.action_space = CustomSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "reset", {}

    def step(self, action):
        return f"step({action})", 0.0, False, False, {}


def make_custom_space_env() -> gym.Env:
    return CustomSpaceEnv()


class UnpicklableObsEnv(CustomSpaceEnv):
    """Observes a lock after its first step: an object no pickle can carry."""

    def step(self, action):
        import threading

        return threading.Lock(), 0.0, False, False, {}


class CountEnv(gym.Env):
    """Discrete observation = steps since reset (a reset seed starts it there); reward =
    action; terminates when the count reaches ``max_count`` (set through ``set_attr``)."""

    observation_space = spaces.Discrete(10)
    action_space = spaces.Discrete(5)

    def __init__(self):
        self.max_count = 100
        self.count = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0 if seed is None else seed
        return self.count, {}

    def step(self, action):
        self.count += 1
        return self.count, int(action), self.count == self.max_count, False, {}


class LooseDtypeEnv(gym.Env):
    """A float32 Box whose observations come back as float64 arrays when ``loose`` (many
    envs do that), else as float32; episodes of ``length`` steps, observation = the count."""

    observation_space = spaces.Box(0.0, 100.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, loose: bool, length: int):
        self.dtype = np.float64 if loose else np.float32
        self.length = length
        self.count = 0

    def _obs(self) -> np.ndarray:
        return np.full(3, self.count + 0.1, dtype=self.dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return self._obs(), {}

    def step(self, action):
        self.count += 1
        return self._obs(), 1.0, self.count == self.length, False, {}


def make_loose_dtype(loose: bool, length: int) -> gym.Env:
    return LooseDtypeEnv(loose, length)


class UnreadyEnv(gym.Env):
    """Cannot step before ``limit`` is set (gymnasium's own tests set such attributes with
    ``set_attr`` after building the vector env); with ``needs_options``, cannot reset without
    options either. Observations and infos are Python ints."""

    observation_space = spaces.Discrete(10)
    action_space = spaces.Discrete(4)

    def __init__(self, needs_options: bool = False):
        self.needs_options = needs_options

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.needs_options and options is None:
            raise TypeError("reset() needs options")
        self.count = 0
        return 0, {"count": 0}

    def step(self, action):
        self.count += 1
        done = self.count >= self.limit
        return self.count, float(action), done, False, {"count": self.count}


class ActionEchoEnv(gym.Env):
    """Reports what its actions were: the reward sums their float leaves in float64, and the
    info names their dtypes; so a float32-rounded action shows."""

    observation_space = spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float64)

    def __init__(self, action_space: spaces.Space):
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action):
        leaves = list(action.values()) if isinstance(action, dict) else [action]
        floats = [np.asarray(leaf) for leaf in leaves if np.asarray(leaf).dtype.kind == "f"]
        total = float(sum(np.sum(leaf, dtype=np.float64) for leaf in floats))
        info = {"dtypes": ",".join(str(leaf.dtype) for leaf in floats)}
        return np.array([total]), total, False, False, info


def make_action_echo(action_space: spaces.Space) -> gym.Env:
    return ActionEchoEnv(action_space)


def make_unready(needs_options: bool = False) -> gym.Env:
    return UnreadyEnv(needs_options)


def make_spaces_env(observation_space, action_space, length=3) -> gym.Env:
    return SpacesEnv(observation_space, action_space, length)


def make_count() -> gym.Env:
    return CountEnv()


def make_seeded(env_id: str, seed: int, **kwargs) -> gym.Env:
    """An env reset with ``seed`` in its factory, as gymnasium's own tests build them."""
    env = gym.make(env_id, disable_env_checker=True, **kwargs)
    env.action_space.seed(seed)
    env.reset(seed=seed)
    return env


# ---- comparison ------------------------------------------------------------------------------
EPISODE_TIME = ("['episode']['t']",)  # wall-clock seconds: compared for type and dtype only


def assert_same(actual, expected, path: str = "", loose: tuple[str, ...] = ()) -> None:
    """``actual`` equals ``expected`` exactly: same dict keys, same types, array dtypes, shapes
    and values, recursively (object arrays element by element). For paths ending with one of
    ``loose`` (e.g. ``"['episode']['t']"``, a wall-clock time) values are not compared."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a dict, got {type(actual)}"
        assert sorted(actual) == sorted(expected), (
            f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        )
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]", loose)
        return
    # Where a space has shape (), a sub-env may return a numpy scalar or a 0-d array; gymvec
    # rebuilds final observations from its buffers: numpy integers for Discrete leaves, 0-d
    # arrays for the others. Same dtype and value either way.
    scalars = (np.generic, np.ndarray)
    if (
        "['final_obs']" in path
        and isinstance(actual, scalars)
        and isinstance(expected, scalars)
        and np.ndim(actual) == np.ndim(expected) == 0
    ):
        actual, expected = np.asarray(actual), np.asarray(expected)
    assert type(actual) is type(expected), f"{path}: type {type(actual)} != {type(expected)}"
    if isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        if path.endswith(loose) and loose:
            return
        if expected.dtype == object:
            for k, (a, e) in enumerate(zip(actual.flat, expected.flat)):
                assert_same(a, e, f"{path}[{k}]", loose)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=path, strict=True)
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{k}]", loose)
    elif not (loose and path.endswith(loose)):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def run_against_sync(
    make_face, env_fns, mode, steps=30, seed=7, reset_options=None, partial_every=None
):
    """Step a face and SyncVectorEnv side by side; returns how many episodes ended.

    Under DISABLED, finished sub-envs are reset with a mask (and fresh seeds for every other
    partial reset), with the caller's options checked to be left as they were. With
    ``partial_every=k``, random sub-envs are also reset with a mask every k steps (any mode).
    """
    rng = np.random.default_rng(seed)
    ref = SyncVectorEnv(env_fns, autoreset_mode=mode)
    env = make_face(env_fns, autoreset_mode=mode)
    try:
        action_space = ref.action_space
        action_space.seed(seed)
        expected = ref.reset(seed=seed, options=reset_options)
        actual = env.reset(seed=seed, options=reset_options)
        assert_same(actual, expected, "reset", EPISODE_TIME)
        ends = np.zeros(env.num_envs, dtype=int)
        for t in range(steps):
            actions = action_space.sample()
            expected = ref.step(actions)
            actual = env.step(actions)
            assert_same(actual, expected, f"step {t}", EPISODE_TIME)
            finished = expected[2] | expected[3]
            ends += finished
            if partial_every and t % partial_every == partial_every - 1:
                mask = rng.random(env.num_envs) < 0.5
                mask[rng.integers(env.num_envs)] = True
                if mode == AutoresetMode.DISABLED:
                    mask |= finished
                expected = ref.reset(options={"reset_mask": mask.copy()})
                actual = env.reset(options={"reset_mask": mask})
                assert_same(actual, expected, f"random partial reset after step {t}", EPISODE_TIME)
            elif mode == AutoresetMode.DISABLED and finished.any():
                seeds = [100 * t + i for i in range(env.num_envs)] if t % 2 else None
                options = {"reset_mask": finished.copy(), "level": t}
                expected = ref.reset(seed=seeds, options=dict(options))
                given = dict(options)
                actual = env.reset(seed=seeds, options=given)
                assert (
                    given.keys() == options.keys() and given["reset_mask"] is options["reset_mask"]
                )
                assert_same(actual, expected, f"partial reset after step {t}", EPISODE_TIME)
        return ends
    finally:
        env.close()
        ref.close()
