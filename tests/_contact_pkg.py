"""A package that registers its env id when it is imported (as ale_py does)."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PkgEnv(gym.Env):
    origin = "import"  # the class the id's entry point names, imported by the package

    def __init__(self):
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


gym.register("GymvecContact/Pkg-v0", entry_point="_contact_pkg:PkgEnv")
