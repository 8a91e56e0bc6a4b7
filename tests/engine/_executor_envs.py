"""The sub-env of the executor contract suite, importable by worker processes and Ray actors.

No torch here: a worker that builds it imports gymnasium only.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym

EPISODE_STEPS = 8  # short episodes, so that a rollout of a few dozen steps autoresets


class ProbeEnv(gym.Wrapper):
    """CartPole that can raise or stall at a given step, and answers requests.

    Args:
        label: what the ``label`` attribute and ``scaled`` report (tests give each sub-env its
            own, to check that a request's answers come back in index order).
        fail_at: the step (counted over the env's life) that raises a ValueError.
        stall_at: ``(step, seconds)``: that step sleeps first.
    """

    def __init__(
        self,
        label: int = 0,
        fail_at: int | None = None,
        stall_at: tuple[int, float] | None = None,
    ):
        super().__init__(gym.make("CartPole-v1", max_episode_steps=EPISODE_STEPS))
        self.label = label
        self.fail_at = fail_at
        self.stall_at = stall_at
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise ValueError(f"probe {self.label}: step {self.steps} failed on purpose")
        if self.stall_at is not None and self.steps == self.stall_at[0]:
            time.sleep(self.stall_at[1])
        return self.env.step(action)

    def scaled(self, factor: int) -> int:
        return self.label * factor

    def pid(self) -> int:
        return os.getpid()


def make_probe(**kwargs) -> gym.Env:
    return ProbeEnv(**kwargs)


def make_cartpole() -> gym.Env:
    """The reference env: what a ProbeEnv runs, without the probe."""
    return gym.make("CartPole-v1", max_episode_steps=EPISODE_STEPS)
