"""Small gymnasium envs used as bench cases, registered under ``GymvecBench/`` ids on import
(their own namespace: ``gymvec/<id>`` are the aliases ``register_vector_ids`` makes).

* ``GymvecBench/BusyStep-v0``: every step burns ``step_seconds`` of CPU (default 1 ms), so the
  bench shows how well a vectorizer spreads CPU-bound work over cores.
* ``GymvecBench/ImageObs-v0``: a near-free step returning ``4x84x84`` uint8 frames, so the bench
  shows what moving large observations costs.
* ``GymvecBench/Latency-v0``: each step waits an exponentially distributed time (mean
  ``mean_seconds``, default 1 ms) drawn from the env's own seeded generator, sleeping (an env
  that waits on something outside the CPU) or, with ``busy=True``, spinning (CPU-bound work of
  variable cost), so the bench shows what first-ready batches gain over lock-step;
  ``GymvecBench/BusyLatency-v0`` is the spinning one.

Entry points are strings, so a worker process (spawn or forkserver) that imports this module,
or builds ``"gymvec.bench.envs:GymvecBench/BusyStep-v0"`` with ``gymnasium.make``, can build them.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

BUSY_STEP_ID = "GymvecBench/BusyStep-v0"
IMAGE_OBS_ID = "GymvecBench/ImageObs-v0"
LATENCY_ID = "GymvecBench/Latency-v0"
BUSY_LATENCY_ID = "GymvecBench/BusyLatency-v0"  # LatencyEnv(busy=True)
BENCH_ENV_IDS = (BUSY_STEP_ID, IMAGE_OBS_ID, LATENCY_ID, BUSY_LATENCY_ID)


def _check_at_least(env: str, name: str, value: float, low: int) -> None:
    if value < low:
        raise ValueError(f"{env} {name} must be >= {low}, got {value}")


def _spin(seconds: float) -> None:
    # Spin rather than sleep: the point is to occupy a core, as a real simulator would.
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _RandomObsEnv(gym.Env):
    """What the CPU- and latency-bound bench envs share: four random floats an observation
    from the env's seeded generator, two actions, and a step counter reset with the episode."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def _observation(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, size=4).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observation(), {}


class BusyStepEnv(_RandomObsEnv):
    """A CPU-bound env: each step spins for ``step_seconds`` and returns a random observation.

    Episodes never terminate; they are truncated after ``episode_steps`` steps.
    """

    def __init__(self, step_seconds: float = 1e-3, episode_steps: int = 200) -> None:
        _check_at_least("BusyStepEnv", "step_seconds", step_seconds, 0)
        _check_at_least("BusyStepEnv", "episode_steps", episode_steps, 1)
        self.step_seconds = step_seconds
        self.episode_steps = episode_steps
        super().__init__()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _spin(self.step_seconds)
        self._t += 1
        reward = 1.0 if int(action) == 1 else 0.0
        return self._observation(), reward, False, self._t >= self.episode_steps, {}


class ImageObsEnv(gym.Env):
    """A cheap env with Atari-sized observations: ``(4, 84, 84)`` uint8 frame stacks.

    At reset it draws ``num_frames`` random frame stacks from its seeded generator; each step
    returns a copy of the next one, so steps stay cheap but every observation is a fresh array.
    Episodes last exactly ``episode_steps`` steps and end truncated.
    """

    metadata = {"render_modes": []}

    def __init__(self, episode_steps: int = 100, num_frames: int = 8) -> None:
        _check_at_least("ImageObsEnv", "episode_steps", episode_steps, 1)
        _check_at_least("ImageObsEnv", "num_frames", num_frames, 1)
        self.episode_steps = episode_steps
        self.num_frames = num_frames
        self.observation_space = spaces.Box(0, 255, shape=(4, 84, 84), dtype=np.uint8)
        self.action_space = spaces.Discrete(4)
        self._frames = np.zeros((num_frames, 4, 84, 84), dtype=np.uint8)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._frames = self.np_random.integers(0, 256, size=self._frames.shape, dtype=np.uint8)
        return self._frames[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._t += 1
        obs = self._frames[self._t % self.num_frames].copy()
        reward = float(int(action) == self._t % 4)
        return obs, reward, False, self._t >= self.episode_steps, {}


class LatencyEnv(_RandomObsEnv):
    """An env whose steps take a variable time: each waits ``Exp(mean_seconds)`` seconds.

    The wait, the observation and the episode's end all come from the env's own seeded
    generator, so a seeded sub-env's trajectory does not depend on when it was stepped.
    ``busy``: spin instead of sleeping (CPU-bound steps of variable cost). An episode
    terminates when the observation's first entry exceeds ``0.95`` and is truncated after
    ``episode_steps`` steps; ``info["delay"]`` holds the step's wait.

    Example:
        >>> env = LatencyEnv(mean_seconds=1e-4)
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(1)
        >>> info["delay"] > 0
        True
    """

    def __init__(
        self, mean_seconds: float = 1e-3, busy: bool = False, episode_steps: int = 200
    ) -> None:
        _check_at_least("LatencyEnv", "mean_seconds", mean_seconds, 0)
        _check_at_least("LatencyEnv", "episode_steps", episode_steps, 1)
        self.mean_seconds = mean_seconds
        self.busy = busy
        self.episode_steps = episode_steps
        super().__init__()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        delay = float(self.np_random.exponential(self.mean_seconds))
        if self.busy:
            _spin(delay)
        else:
            time.sleep(delay)
        self._t += 1
        obs = self._observation()
        reward = float(int(action)) + float(obs[1])
        terminated = bool(obs[0] > 0.95)
        return obs, reward, terminated, self._t >= self.episode_steps, {"delay": delay}


def register_bench_envs() -> None:
    """Register the bench envs with gymnasium; calling it again changes nothing."""
    entry_points = {
        BUSY_STEP_ID: "gymvec.bench.envs:BusyStepEnv",
        IMAGE_OBS_ID: "gymvec.bench.envs:ImageObsEnv",
        LATENCY_ID: "gymvec.bench.envs:LatencyEnv",
        BUSY_LATENCY_ID: "gymvec.bench.envs:LatencyEnv",
    }
    kwargs = {BUSY_LATENCY_ID: {"busy": True}}
    for env_id, entry_point in entry_points.items():
        if env_id not in gym.registry:
            # The envs truncate themselves, so no TimeLimit wrapper is asked for.
            gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs.get(env_id, {}))


def importable_id(env_id: str) -> str:
    """``env_id`` in gymnasium's ``"module:id"`` form when it is a bench env, else unchanged.

    A worker started with spawn has not imported this module; ``gymnasium.make`` imports the
    module named before the colon, which registers the bench envs there too.
    """
    return f"{__name__}:{env_id}" if env_id in BENCH_ENV_IDS else env_id


register_bench_envs()
