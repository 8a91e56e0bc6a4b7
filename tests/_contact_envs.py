"""Envs for test_first_contact: one that logs what is done to it, one that hangs."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class LoggingEnv(gym.Env):
    """Appends ``init``/``reset``/``step`` and its pid to the file ``log`` at each call;
    reports numeric infos (``steps``, ``energy``) and a string one (``phase``)."""

    metadata = {"render_modes": []}

    def __init__(self, log: str, episode_steps: int = 5):
        self.log = log
        self.episode_steps = episode_steps
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0
        self._write("init")

    def _write(self, what: str) -> None:
        with open(self.log, "a") as file:
            file.write(f"{what} {os.getpid()}\n")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._write("reset")
        self._t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {"steps": 0, "phase": "go"}

    def step(self, action):
        self._write("step")
        self._t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        info = {"steps": self._t, "energy": float(action) * 0.5, "phase": "run"}
        return obs, 1.0, False, self._t >= self.episode_steps, info


class HangingEnv(gym.Env):
    """CartPole-like spaces; with ``hang="step"`` (or ``"reset"``) that call sleeps for an
    hour once ``after`` steps were taken (resets: always)."""

    metadata = {"render_modes": []}

    def __init__(self, hang: str | None = None, after: int = 0):
        self.hang, self.after = hang, after
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.hang == "reset":
            time.sleep(3600)
        self._t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.hang == "step" and self._t >= self.after:
            time.sleep(3600)
        self._t += 1
        return np.zeros(2, np.float32), 0.0, False, False, {}


def read_log(path: str) -> list[tuple[str, int]]:
    try:
        with open(path) as file:
            return [(what, int(pid)) for what, pid in (line.split() for line in file)]
    except FileNotFoundError:
        return []


LOGGING_ID = "GymvecContact/Logging-v0"
gym.register(LOGGING_ID, entry_point=LoggingEnv)
