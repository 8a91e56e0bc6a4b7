"""Checked by mypy (``[tool.mypy]`` in pyproject.toml): what users get from gymvec's public
names is typed, not ``Any``. Never run: ``assert_type`` only speaks to the type checker."""

from __future__ import annotations

import gymnasium as gym
from typing_extensions import assert_type

import gymvec
from gymvec.layout.auto import AutoVectorEnv
from gymvec.vector.vector_env import GymnasiumVectorEnv


def public_types() -> None:
    # backend="auto" (the default) chooses the layout at the first reset
    assert_type(gymvec.make_vec("CartPole-v1", 2), GymnasiumVectorEnv | AutoVectorEnv)
    assert_type(
        gymvec.ParallelVectorEnv([lambda: gym.make("CartPole-v1")]), gymvec.ParallelVectorEnv
    )
    assert_type(gymvec.SerialEnv(2, lambda: gymvec.GymEnv("CartPole-v1")), gymvec.SerialEnv)
    assert_type(gymvec.ParallelEnv(2, lambda: gymvec.GymEnv("CartPole-v1")), gymvec.ParallelEnv)
    assert_type(gymvec.WorkerError("failed"), gymvec.WorkerError)
