"""Generated cases for the differential fuzz tests (``test_fuzz.py``): spaces, an env over
them, and call sequences, as hypothesis strategies.

``FuzzEnv`` is deterministic given its config, its index and its reset seeds, so the same
factories stepped by gymnasium's ``SyncVectorEnv`` and by gymvec give the same values. Its
observations come from its own generator (not ``space.sample()``), down to each dtype's
extremes. This module does not import torch: forked and spawned workers build the env fast.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from hypothesis import strategies as st

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
TORCH_INT_DTYPES = INT_DTYPES[:-1]  # no uint64
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
SHAPES = [(), (1,), (3,), (2, 2)]
INFO_KINDS = (
    "int",
    "float",
    "bool",
    "np_float32",
    "np_int16",
    "np_bool",
    "array",
    "int_array",
    "str",
    "list",
    "none",
    "nested",
    "changing",
)
INFO_WHEN = ("always", "reset", "step", "end", "every_2", "odd_env")


# ---- spaces -----------------------------------------------------------------------------------
@st.composite
def boxes(draw, dtypes=INT_DTYPES + FLOAT_DTYPES, small_ints: bool = False) -> spaces.Box:
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(st.sampled_from(SHAPES))
    if dtype.kind == "f":
        low = draw(st.sampled_from([-np.inf, -1000.0, -1.0, 0.0]))
        high = draw(st.sampled_from([np.inf, 1.0, 2.5, 1000.0]))
        if low == 0.0 and high == np.inf and draw(st.booleans()):
            low = -np.inf
    elif small_ints:
        low, high = (0, 5) if dtype.kind == "u" else (-5, 5)
    else:
        info = np.iinfo(dtype)
        if dtype.kind == "u":
            low = draw(st.sampled_from([0, 3]))  # gymnasium refuses infinite bounds here
            high = draw(st.sampled_from([int(info.max), 10]))
        else:
            low = draw(st.sampled_from([-np.inf, int(info.min), -3]))
            high = draw(st.sampled_from([np.inf, int(info.max), 10]))
    return spaces.Box(low, high, shape=shape, dtype=dtype)


def discretes() -> st.SearchStrategy:
    return st.builds(spaces.Discrete, st.integers(1, 6), start=st.integers(-3, 3))


@st.composite
def multi_discretes(draw) -> spaces.MultiDiscrete:
    size = draw(st.integers(1, 3))
    nvec = draw(st.lists(st.integers(1, 5), min_size=size, max_size=size))
    start = draw(st.lists(st.integers(-3, 3), min_size=size, max_size=size))
    return spaces.MultiDiscrete(nvec, start=start)


def multi_binaries() -> st.SearchStrategy:
    return st.integers(1, 4).map(spaces.MultiBinary)


def leaf_spaces(
    small_ints: bool = False, floats=FLOAT_DTYPES, ints=INT_DTYPES
) -> st.SearchStrategy:
    dtypes = ints + floats
    return st.one_of(
        boxes(dtypes, small_ints=small_ints), discretes(), multi_discretes(), multi_binaries()
    )


def composite_spaces(leaves: st.SearchStrategy, depth: int = 2) -> st.SearchStrategy:
    """Leaves, and Dict and Tuple spaces of them nested up to ``depth`` levels."""

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        keys = st.sampled_from(["a", "b", "pos", "vel", "z"])
        return st.one_of(
            st.dictionaries(keys, children, min_size=1, max_size=3).map(spaces.Dict),
            st.lists(children, min_size=1, max_size=3).map(lambda xs: spaces.Tuple(xs)),
        )

    return st.recursive(leaves, extend, max_leaves=4 if depth > 1 else 1)


def observation_spaces(ints=INT_DTYPES) -> st.SearchStrategy:
    return composite_spaces(leaf_spaces(ints=ints))


def action_spaces(ints=INT_DTYPES) -> st.SearchStrategy:
    """Actions: the same kinds, Box integers kept small (gymnasium's own sampling of wide
    integer Boxes is not what is under test) and float16 left out."""
    return composite_spaces(
        leaf_spaces(small_ints=True, floats=[np.float32, np.float64], ints=ints)
    )


# ---- values -----------------------------------------------------------------------------------
def sample_value(space: spaces.Space, rng: np.random.Generator):
    """A value of ``space`` drawn from ``rng``: Box values reach their bounds and, where a
    bound is infinite or the full integer range, each dtype's extremes."""
    if isinstance(space, spaces.Dict):
        return {key: sample_value(sub, rng) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(sample_value(sub, rng) for sub in space.spaces)
    if isinstance(space, spaces.Discrete):
        return np.int64(space.start + rng.integers(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return (space.start + rng.integers(space.nvec)).astype(space.dtype)
    if isinstance(space, spaces.MultiBinary):
        return rng.integers(0, 2, size=space.n, dtype=np.int8)
    dtype, shape = space.dtype, space.shape
    if dtype.kind == "f":
        low = np.where(np.isfinite(space.low), space.low, -1e4).astype(np.float64)
        high = np.where(np.isfinite(space.high), space.high, 1e4).astype(np.float64)
        value = rng.uniform(low, high, size=shape)
        pick = rng.integers(0, 4, size=shape)  # some values exactly on a bound
        value = np.where(pick == 0, space.low, np.where(pick == 1, space.high, value))
        value = np.where(np.isfinite(value), value, rng.normal(size=shape) * 1e3)
        return value.astype(dtype)
    low, high = space.low.min(), space.high.max()
    value = rng.integers(low, high, size=shape, dtype=dtype, endpoint=True)
    pick = rng.integers(0, 4, size=shape)
    value = np.where(pick == 0, space.low, np.where(pick == 1, space.high, value))
    return value.astype(dtype)


def leaves_as_float(value) -> float:
    """The sum of every number in a (nested) action, in float64: the reward shows what the
    sub-env was handed."""
    if isinstance(value, dict):
        return sum(leaves_as_float(v) for v in value.values())
    if isinstance(value, tuple | list):
        return sum(leaves_as_float(v) for v in value)
    array = np.asarray(value, dtype=np.float64)
    return float(np.where(np.isfinite(array), array, 0.0).sum() % 1e6)


# ---- the env ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class InfoEntry:
    key: str
    kind: str
    when: str


@dataclasses.dataclass(frozen=True)
class FuzzConfig:
    """What a generated env is: its spaces, per sub-env the lengths of its episodes (cycled)
    and how they end, and its info entries."""

    observation_space: spaces.Space
    action_space: spaces.Space
    lengths: tuple[tuple[int, ...], ...]  # per sub-env, episode lengths (cycled)
    ends: tuple[str, ...]  # per episode (cycled): "terminated", "truncated" or "both"
    infos: tuple[InfoEntry, ...]

    @property
    def num_envs(self) -> int:
        return len(self.lengths)

    def env_fns(self) -> list:
        return [functools.partial(make_fuzz_env, self, i) for i in range(self.num_envs)]


class FuzzEnv(gym.Env):
    """The env of a :class:`FuzzConfig`, sub-env number ``index``.

    Reward: the step count, plus the sum of the action's numbers, plus ``bonus`` (an
    attribute that ``set_attr`` changes); ``describe(scale)`` is a method for ``call``.
    """

    def __init__(self, config: FuzzConfig, index: int):
        self.config, self.index = config, index
        # copies: sub-envs must not share the spaces' random generators
        self.observation_space = copy.deepcopy(config.observation_space)
        self.action_space = copy.deepcopy(config.action_space)
        self.bonus = 0.0
        self.episode = -1
        self.t = 0

    def describe(self, scale: int = 1) -> tuple:
        return (self.index, self.t * scale, self.episode)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        lengths = self.config.lengths[self.index]
        self.length = lengths[self.episode % len(lengths)]
        self.end = self.config.ends[(self.episode + self.index) % len(self.config.ends)]
        self.t = 0
        return sample_value(self.observation_space, self.np_random), self._info("reset", False)

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        terminated = done and self.end in ("terminated", "both")
        truncated = done and self.end in ("truncated", "both")
        reward = self.t + leaves_as_float(action) + self.bonus
        obs = sample_value(self.observation_space, self.np_random)
        return obs, reward, terminated, truncated, self._info("step", done)

    def _info(self, phase: str, done: bool) -> dict:
        info = {}
        for entry in self.config.infos:
            when = entry.when
            present = (
                when == "always"
                or when == phase
                or (when == "end" and done)
                or (when == "every_2" and self.t % 2 == 0)
                or (when == "odd_env" and self.index % 2 == 1)
            )
            if present:
                info[entry.key] = self._info_value(entry.kind)
        return info

    def _info_value(self, kind: str):
        t, rng = self.t, self.np_random
        if kind == "int":
            return t * 3 - 4
        if kind == "float":
            return float(rng.normal())
        if kind == "bool":
            return t % 2 == 0
        if kind == "np_float32":
            return np.float32(t / 4)
        if kind == "np_int16":
            return np.int16(-t)
        if kind == "np_bool":
            return np.bool_(t % 3 == 0)
        if kind == "array":
            return rng.normal(size=2)
        if kind == "int_array":
            return np.arange(3, dtype=np.int32) * t
        if kind == "str":
            return f"t={t}"
        if kind == "list":
            return [t, "x"]
        if kind == "none":
            return None
        if kind == "nested":
            inner = {"depth": t, "deeper": {"value": float(t) * 1.5}}
            if t % 2:
                inner["sometimes"] = np.array([t], dtype=np.int64)
            return inner
        return t if t < 2 else t + 0.5  # "changing": an int first, a float later


def make_fuzz_env(config: FuzzConfig, index: int) -> gym.Env:
    return FuzzEnv(config, index)


@st.composite
def fuzz_configs(draw, min_envs: int = 2, max_envs: int = 4, ints=INT_DTYPES) -> FuzzConfig:
    """A generated env; ``ints``: the integer dtypes its Boxes may have (the tensordict API
    refuses uint64, which torch cannot hold, with a TypeError)."""
    num_envs = draw(st.integers(min_envs, max_envs))
    lengths = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)
    keys = st.sampled_from(["t", "speed", "name", "extra", "detail", "k"])
    entries = st.builds(InfoEntry, keys, st.sampled_from(INFO_KINDS), st.sampled_from(INFO_WHEN))
    infos = draw(st.lists(entries, max_size=4, unique_by=lambda e: e.key))
    return FuzzConfig(
        observation_space=draw(observation_spaces(ints)),
        action_space=draw(action_spaces(ints)),
        lengths=tuple(draw(lengths) for _ in range(num_envs)),
        ends=tuple(
            draw(
                st.lists(
                    st.sampled_from(["terminated", "truncated", "both"]), min_size=1, max_size=3
                )
            )
        ),
        infos=tuple(infos),
    )


# ---- call sequences ---------------------------------------------------------------------------
def seeds(num_envs: int) -> st.SearchStrategy:
    one = st.integers(0, 2**31)
    return st.one_of(
        st.none(),
        one,
        st.lists(st.one_of(st.none(), one), min_size=num_envs, max_size=num_envs),
    )


def masks(num_envs: int) -> st.SearchStrategy:
    """None (every sub-env) or a mask with at least one True."""
    mask = st.lists(st.booleans(), min_size=num_envs, max_size=num_envs)
    return st.one_of(st.none(), mask.filter(any).map(tuple))


def operations(num_envs: int) -> st.SearchStrategy:
    """One call: ("step",), ("reset", seed, mask), ("call", scale), ("get_attr", name) or
    ("set_attr", values), steps the most frequent."""
    step = st.just(("step",))
    reset = st.tuples(st.just("reset"), seeds(num_envs), masks(num_envs))
    call = st.tuples(st.just("call"), st.integers(1, 3))
    get_attr = st.tuples(st.just("get_attr"), st.sampled_from(["bonus", "t", "episode"]))
    value = st.floats(-2, 2, allow_nan=False).map(lambda x: round(x, 3))
    values = st.one_of(value, st.lists(value, min_size=num_envs, max_size=num_envs))
    set_attr = st.tuples(st.just("set_attr"), values)
    return st.one_of(step, step, step, step, reset, call, get_attr, set_attr)
