"""Blocks (gymnasium vector envs as sub-envs) for the tests: importable by worker processes."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.vector import AutoresetMode, SyncVectorEnv

MAX_STEPS = 12  # short episodes: every test sees resets


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)


def sync_block(n: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> SyncVectorEnv:
    """``n`` CartPoles in gymnasium's SyncVectorEnv: a block whose rows equal a flat
    SyncVectorEnv's rows with the same seeds."""
    return SyncVectorEnv([cartpole] * n, autoreset_mode=mode)


def sync_block_fn(n: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> functools.partial:
    return functools.partial(sync_block, n, mode)


def cartpole_block(n: int) -> CartPoleVectorEnv:
    """gymnasium's numpy CartPole over ``n`` rows (NEXT_STEP only)."""
    return CartPoleVectorEnv(n, max_episode_steps=MAX_STEPS)


WIDE = 4096  # each row's CartPole state repeated to 16 kB: a batch fills observation lanes


def wide_cartpole() -> gym.Env:
    """A CartPole whose observation is its state repeated ``WIDE`` times (large rows)."""
    env = cartpole()
    space = gym.spaces.Box(-np.inf, np.inf, (4 * WIDE,), np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: np.tile(obs, WIDE), space)


def wide_block(n: int, mode: AutoresetMode = AutoresetMode.DISABLED) -> SyncVectorEnv:
    return SyncVectorEnv([wide_cartpole] * n, autoreset_mode=mode)


def pendulum_block(n: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * n)


class RaisingBlock(SyncVectorEnv):
    """A block that raises at its ``fail_at``-th step."""

    def __init__(self, n: int, fail_at: int = 3):
        super().__init__([cartpole] * n)
        self.fail_at, self.steps = fail_at, 0

    def step(self, actions):
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("the block broke")
        return super().step(actions)


class ShortBlock(SyncVectorEnv):
    """A block whose step returns one reward too few."""

    def __init__(self, n: int):
        super().__init__([cartpole] * n)

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = super().step(actions)
        return obs, rewards[:-1], terminations, truncations, infos


class CountingBlock(SyncVectorEnv):
    """A block that counts the calls of its method ``ping``."""

    def __init__(self, n: int):
        super().__init__([cartpole] * n)
        self.pings = 0

    def ping(self) -> int:
        self.pings += 1
        return self.pings


def not_an_env() -> object:
    return np.zeros(3)


class HangingBlock(SyncVectorEnv):
    """A block whose ``hang_at``-th step sleeps far longer than any test waits."""

    def __init__(self, n: int, hang_at: int = 2):
        super().__init__([cartpole] * n)
        self.hang_at, self.steps = hang_at, 0

    def step(self, actions):
        self.steps += 1
        if self.steps == self.hang_at:
            import time

            time.sleep(600)
        return super().step(actions)
