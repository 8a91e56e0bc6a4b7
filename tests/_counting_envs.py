"""A CartPole that logs every build, reset and step to a file, with the pid of the process
that ran it: what a test reads to see which process touched which sub-env, and when.

No torch here: the factories that wrap it in a ``GymEnv`` import gymvec's tensordict side.
"""

from __future__ import annotations

import os

import gymnasium as gym


class CountingEnv(gym.Wrapper):
    def __init__(self, log_path: str):
        super().__init__(gym.make("CartPole-v1"))
        self.log_path = log_path
        self._log("build")

    def _log(self, event: str) -> None:
        with open(self.log_path, "a") as log:
            log.write(f"{event} {os.getpid()}\n")

    def reset(self, **kwargs):
        self._log("reset")
        return super().reset(**kwargs)

    def step(self, action):
        self._log("step")
        return super().step(action)


def make_counting_gym_env(log_path: str):
    """A ``GymEnv`` of a ``CountingEnv``."""
    from gymvec import GymEnv

    return GymEnv(CountingEnv(log_path))


def read_log(log_path: str) -> list[tuple[str, int]]:
    """(event, pid) of each line logged so far."""
    if not os.path.exists(log_path):
        return []
    with open(log_path) as log:
        return [(event, int(pid)) for event, pid in (line.split() for line in log)]
