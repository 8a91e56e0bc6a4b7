"""What the tianshou adapter runs on one sub-env, possibly inside a worker process.

A module apart from ``gymvec.tianshou`` because (cloud)pickle sends module-level functions by
reference: a worker that runs one imports its module, and this one does not import tianshou.
"""

from __future__ import annotations

import gymnasium as gym


def seed_action_space(env: gym.Env, seed: int) -> None:
    """Seed ``env``'s action space, as tianshou's env workers do when they seed a sub-env."""
    env.action_space.seed(seed)
