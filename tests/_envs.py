"""Envs and env factories for the tests.

Factories live here, at module level, so that worker processes (spawn included) import them
by reference instead of receiving test-module closures. Importing this module registers the
custom ids below, in the parent and in every worker that unpickles one of its factories.
"""

from __future__ import annotations

import multiprocessing
import os

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from gymvec import EnvBase, GymEnv
from gymvec.specs import Bounded, Composite, Unbounded

DICT_ENV_ID = "GymvecTest/DictEnv-v0"
FAILING_ENV_ID = "GymvecTest/Failing-v0"


class DictEnv(gym.Env):
    """Dict observations (nested Dict too) and Dict actions, seeded through ``reset``.

    Episodes end by termination (the position leaves a box) or by truncation (``max_steps``),
    so both flags show up in a few hundred steps. Infos hold a number, a bool, an array, a
    string and a nested dict; ``"bonus"`` appears only when an episode ends.
    """

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 25, scale: float = 1.0, bound: float = 10.0):
        self.max_steps = max_steps
        self.scale = scale
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-bound, bound, shape=(3,), dtype=np.float32),
                "count": spaces.Box(0, 1000, shape=(), dtype=np.int64),
                "sensors": spaces.Dict(
                    {
                        "flags": spaces.MultiBinary(2),
                        "heat": spaces.Box(-np.inf, np.inf, shape=(2, 2), dtype=np.float64),
                    }
                ),
            }
        )
        self.action_space = spaces.Dict(
            {
                "move": spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
                "gear": spaces.Discrete(3, start=-1),
            }
        )

    def _obs(self):
        return {
            "position": self.position.copy(),
            "count": np.array(self.steps, dtype=np.int64),
            "sensors": {
                "flags": (self.position[:2] > 0).astype(np.int8),
                "heat": self.heat.copy(),
            },
        }

    def _info(self, done: bool = False) -> dict:
        info = {
            "steps": self.steps,
            "speed": float(np.abs(self.position).sum()),
            "inside": bool(np.all(np.abs(self.position) < 1.0)),
            "vector": self.position[:2].astype(np.float64),
            "phase": "end" if done else "run",
            "detail": {"gear_sum": self.gear_sum, "name": "dict-env"},
        }
        if done:
            info["bonus"] = 1.5
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-0.5, 0.5, size=3).astype(np.float32)
        self.heat = self.np_random.normal(size=(2, 2))
        self.steps = 0
        self.gear_sum = 0
        return self._obs(), self._info()

    def step(self, action):
        move = np.asarray(action["move"], dtype=np.float32)
        gear = int(action["gear"])
        self.gear_sum += gear
        self.position = (self.position + self.scale * 0.4 * move * (gear + 2)).astype(np.float32)
        self.heat = self.heat * 0.9 + self.np_random.normal(size=(2, 2)) * 0.1
        self.steps += 1
        terminated = bool(np.abs(self.position).max() > 3.0)
        truncated = not terminated and self.steps >= self.max_steps
        reward = float(-np.abs(self.position).sum() + gear)
        return self._obs(), reward, terminated, truncated, self._info(terminated or truncated)


class FailingEnv(gym.Env):
    """CartPole-like spaces; raises in ``step`` number ``fail_step`` or in ``reset``."""

    def __init__(self, fail_step: int | None = None, fail_reset: bool = False):
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.fail_step = fail_step
        self.fail_reset = fail_reset
        self.resets = 0
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        # The first reset is GymEnv's info probe in the parent; later ones are the user's.
        if self.fail_reset and self.resets > 1:
            raise RuntimeError("reset failed on purpose")
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.fail_step is not None and self.steps >= self.fail_step:
            raise RuntimeError(f"step {self.steps} failed on purpose")
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}


gym.register(DICT_ENV_ID, entry_point=DictEnv)
gym.register(FAILING_ENV_ID, entry_point=FailingEnv)


class CounterEnv(EnvBase):
    """A pure-tensordict env: the observation counts up from a seeded random start.

    Terminates when the count passes ``limit``. The action (a float) is added to the reward.
    """

    def __init__(self, limit: int = 7):
        super().__init__()
        self.limit = limit
        self.observation_spec = Composite({"observation": Unbounded(shape=(2,))})
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
        self.generator = torch.Generator().manual_seed(0)
        self.count = torch.zeros(2)

    def _set_seed(self, seed):
        self.generator.manual_seed(0 if seed is None else seed)

    def _reset(self, td):
        start = torch.randint(0, 3, (1,), generator=self.generator).float()
        self.count = torch.cat([start, -start])
        return TensorDict(
            {
                "observation": self.count.clone(),
                "done": torch.zeros(1, dtype=torch.bool),
                "terminated": torch.zeros(1, dtype=torch.bool),
                "truncated": torch.zeros(1, dtype=torch.bool),
            }
        )

    def _step(self, td):
        self.count = self.count + torch.tensor([1.0, -1.0])
        terminated = bool(self.count[0] >= self.limit)
        reward = td.get("action").sum().reshape(1) + self.count[0]
        flag = torch.tensor([terminated])
        return TensorDict(
            {
                "observation": self.count.clone(),
                "reward": reward,
                "done": flag.clone(),
                "terminated": flag,
                "truncated": torch.zeros(1, dtype=torch.bool),
            }
        )

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

    def pid(self) -> int:
        return os.getpid()


# ---- factories --------------------------------------------------------------------------------
def make_cartpole(**kwargs) -> GymEnv:
    return GymEnv("CartPole-v1", **kwargs)


def make_pendulum(**kwargs) -> GymEnv:
    return GymEnv("Pendulum-v1", **kwargs)


def make_dict_env(**kwargs) -> GymEnv:
    return GymEnv(DICT_ENV_ID, **kwargs)


def make_gym_cartpole() -> gym.Env:
    """A bare gymnasium env (the batched envs wrap it in GymEnv themselves)."""
    return gym.make("CartPole-v1")


def make_counter(limit: int = 7) -> CounterEnv:
    return CounterEnv(limit)


def make_failing(**kwargs) -> GymEnv:
    return GymEnv(FAILING_ENV_ID, **kwargs)


def make_broken() -> GymEnv:
    raise RuntimeError("the factory failed on purpose")


def make_cartpole_in_parent_only() -> GymEnv:
    """Builds in the main process, fails in worker processes."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("the factory failed on purpose in a worker")
    return GymEnv("CartPole-v1")


def getpid(env) -> int:
    """For ``apply``-style requests: the process a sub-env lives in."""
    return os.getpid()
