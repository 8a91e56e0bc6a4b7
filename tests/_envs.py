"""gymnasium envs and env factories for the tests.

Factories live here, at module level, so that worker processes (spawn included) import them
by reference instead of receiving test-module closures. Importing this module registers the
custom ids below, in the parent and in every worker that unpickles one of its factories.

This module does not import torch: a spawned worker that builds bare gymnasium envs imports it
in a fraction of a second instead of many seconds (2-core CI). Factories that return a GymEnv
import gymvec when they are called.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

DICT_ENV_ID = "GymvecTest/DictEnv-v0"
FAILING_ENV_ID = "GymvecTest/Failing-v0"


class DictEnv(gym.Env):
    """Dict observations (nested Dict too) and Dict actions, seeded through ``reset``.

    Episodes end by termination (the position leaves a box) or by truncation (``max_steps``),
    so both flags show up in a few hundred steps. Infos hold a number, a bool, an array, a
    string and a nested dict; ``"bonus"`` appears only when an episode ends.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        max_steps: int = 25,
        scale: float = 1.0,
        bound: float = 10.0,
        render_mode: str | None = None,
    ):
        self.max_steps = max_steps
        self.scale = scale
        self.render_mode = render_mode
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

    def render(self):
        """A 4x4 RGB frame whose red channel shows the position (rgb_array mode)."""
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((4, 4, 3), dtype=np.uint8)
        frame[..., 0] = np.uint8(min(np.abs(self.position).sum() * 20, 255))
        return frame

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
    """Raises in ``step`` number ``fail_step`` (and after), or in every ``reset`` in a worker.

    Resets in the main process work (a GymEnv of it can be used there).
    """

    def __init__(self, fail_step: int | None = None, fail_reset: bool = False):
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.fail_step = fail_step
        self.fail_reset = fail_reset
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_reset and multiprocessing.parent_process() is not None:
            raise RuntimeError("reset failed on purpose")
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.fail_step is not None and self.steps >= self.fail_step:
            raise RuntimeError(f"step {self.steps} failed on purpose")
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}


gym.register(DICT_ENV_ID, entry_point=DictEnv)
gym.register(FAILING_ENV_ID, entry_point=FailingEnv)


def obs_leaves(obs, key: tuple = ()) -> dict[tuple, np.ndarray]:
    """A gymnasium observation (batched or not) as {tensordict key: array}: the mapping GymEnv
    documents (a Dict's keys, nested, or ``"observation"``)."""
    if isinstance(obs, dict):
        leaves = {}
        for name, value in obs.items():
            leaves.update(obs_leaves(value, (*key, name)))
        return leaves
    return {key or ("observation",): np.asarray(obs)}


# ---- factories --------------------------------------------------------------------------------
def make_gym_env(env_id: str, **kwargs) -> gym.Env:
    """A bare gymnasium env (the batched envs wrap it in GymEnv themselves)."""
    return gym.make(env_id, **kwargs)


def make_gym_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def make_gym_recorded_cartpole() -> gym.Env:
    """CartPole whose step info holds ``"episode"`` at an episode's end."""
    return gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))


class ResetInfoCartPole(gym.Wrapper):
    """CartPole whose reset info holds ``"phase": "start"`` and the reset's number (a string:
    no info field takes it, so it reaches the parent as extras)."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.resets = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.resets += 1
        return obs, {**info, "phase": "start", "reset": str(self.resets)}


class HangingEnv(FailingEnv):
    """Never returns from its first ``step`` in a worker, and ignores SIGTERM there: only
    SIGKILL stops it (steps in the main process work)."""

    def step(self, action):
        if multiprocessing.parent_process() is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
        return super().step(action)


class StallingCartPole(gym.Wrapper):
    """CartPole whose step number ``stall_step`` after a reset takes ``stall_s`` seconds, or
    raises KeyboardInterrupt when ``stall_s`` is None (a Ctrl-C that lands in the middle of a
    command); once in its life."""

    def __init__(self, stall_step: int = 2, stall_s: float | None = 0.5):
        super().__init__(gym.make("CartPole-v1"))
        self.stall_step, self.stall_s = stall_step, stall_s
        self.steps = 0
        self.stalled = False

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def pause(self, seconds: float) -> str:
        time.sleep(seconds)
        return "paused"

    def step(self, action):
        self.steps += 1
        if self.steps == self.stall_step and not self.stalled:
            self.stalled = True
            if self.stall_s is None:
                raise KeyboardInterrupt
            time.sleep(self.stall_s)
        return self.env.step(action)


def make_gym_stalling(**kwargs) -> gym.Env:
    return StallingCartPole(**kwargs)


class MisshapenEnv(gym.Env):
    """From its step number ``bad_step`` on, returns an observation that does not fit its
    space: shorter (``plain``) or longer (``long``), a scalar that numpy would broadcast
    (``scalar``), or (``dict``) a Dict without its "b" entry."""

    def __init__(self, bad_step: int = 2, kind: str = "plain"):
        box = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.kind = kind
        self.observation_space = box if kind != "dict" else spaces.Dict(a=box, b=box)
        self.action_space = spaces.Discrete(2)
        self.bad_step = bad_step
        self.steps = 0

    def _obs(self, bad: bool):
        if self.kind == "scalar" and bad:
            return 0.5
        if self.kind != "dict":
            return np.zeros((5 if self.kind == "long" else 3) if bad else 4, dtype=np.float32)
        obs = {"a": np.zeros(4, dtype=np.float32), "b": np.zeros(4, dtype=np.float32)}
        if bad:
            del obs["b"]
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(False), {}

    def step(self, action):
        self.steps += 1
        return self._obs(self.steps >= self.bad_step), 0.0, False, False, {}


class BadResetEnv(MisshapenEnv):
    """Terminates at every step; from its second reset on, if ``bad``, returns an observation
    of shape (3,) where its space has (4,)."""

    def __init__(self, bad: bool = True):
        super().__init__()
        self.bad = bad
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        return self._obs(self.bad and self.resets > 1), {}

    def step(self, action):
        return self._obs(False), 1.0, True, False, {}


def make_gym_cartpole_after_collecting() -> gym.Env:
    """CartPole; in a worker process, first runs the cyclic garbage collector, which frees
    the garbage a forked worker inherited from its parent."""
    if multiprocessing.parent_process() is not None:
        gc.collect()
    return gym.make("CartPole-v1")


class BadStepResultEnv(MisshapenEnv):
    """From its step number ``bad_step`` on, returns a ``field`` ("reward" or "terminated")
    that is an array, not a scalar."""

    def __init__(self, bad_step: int = 2, field: str = "reward"):
        super().__init__(bad_step=2**62)  # observations that fit
        self.field, self.bad_field_step = field, bad_step

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps >= self.bad_field_step:
            if self.field == "reward":
                reward = np.array([1.0])
            else:
                terminated = np.array([True, False])
        return obs, reward, terminated, truncated, info


CLOSED: list[int] = []  # the ``tag`` of each BadCloseCartPole closed in this process


class BadCloseCartPole(gym.Wrapper):
    """CartPole whose ``close`` raises once it has stepped when ``fails`` (a batched env
    closes the one it built for its layout unstepped); every close records ``tag`` in
    ``CLOSED``."""

    def __init__(self, tag: int = 0, fails: bool = True):
        super().__init__(gym.make("CartPole-v1"))
        self.tag, self.fails = tag, fails
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return self.env.step(action)

    def close(self):
        CLOSED.append(self.tag)
        super().close()
        if self.fails and self.steps >= 2:
            raise RuntimeError("close failed on purpose")


def make_gym_hanging() -> gym.Env:
    return HangingEnv()


def make_gym_exiting_in_worker() -> gym.Env:
    """Builds in the main process; a worker process that calls it exits with code 3."""
    if multiprocessing.parent_process() is not None:
        os._exit(3)
    return gym.make("CartPole-v1")


def make_gym_failing(**kwargs) -> gym.Env:
    return FailingEnv(**kwargs)


def make_gym_env_in_parent_only() -> gym.Env:
    """Builds in the main process, fails in worker processes."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("the factory failed on purpose in a worker")
    return gym.make("CartPole-v1")


def make_broken() -> gym.Env:
    raise RuntimeError("the factory failed on purpose")


def make_gym_env_wrapped(env_id: str, **kwargs):
    """A GymEnv (imports torch in the process that calls it)."""
    from gymvec import GymEnv

    return GymEnv(env_id, **kwargs)


def make_cartpole(**kwargs):
    return make_gym_env_wrapped("CartPole-v1", **kwargs)


def make_pendulum(**kwargs):
    return make_gym_env_wrapped("Pendulum-v1", **kwargs)


def make_dict_env(**kwargs):
    return make_gym_env_wrapped(DICT_ENV_ID, **kwargs)


def make_failing(**kwargs):
    return make_gym_env_wrapped(FAILING_ENV_ID, **kwargs)


def getpid(env) -> int:
    """For ``apply`` requests: the process a sub-env lives in."""
    return os.getpid()


class TimedEnv(gym.Env):
    """Each step sleeps ``delay`` seconds and reports when it ran (``start``/``end`` in its
    info, on the clock every process shares), so that tests can see which steps overlapped;
    ``slow_method`` sleeps too."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, delay: float = 0.05):
        self.delay = delay

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        start = time.monotonic()
        time.sleep(self.delay)
        info = {"start": start, "end": time.monotonic()}
        return np.zeros(1, np.float32), 0.0, False, False, info

    def slow_method(self, seconds: float) -> str:
        time.sleep(seconds)
        return "done"


class TemporariesEnv(gym.Env):
    """Each step makes and drops temporaries of 64 KiB, as a numpy vector env's step does, and
    reports the page faults its process took during the step (``info["faults"]``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        import resource

        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        temporaries = [np.ones(8192) for _ in range(24)]
        total = sum(float(t[0]) for t in temporaries)
        del temporaries
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        return np.zeros(1, np.float32), total, False, False, {"faults": faults}
