"""What a sub-env stepped alone gives, to check batched trajectories against."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def next_step_alone(env: gym.Env, seed: int, actions: list) -> list[tuple]:
    """``env`` alone under NEXT_STEP autoreset (gymnasium's default, by hand): its seeded reset,
    then per action its step or, after an episode's end, its reset as a transition (reward 0,
    flags False). Each record is ``(obs, reward, terminated, truncated, step_info)``, the info
    None for resets."""
    obs, _ = env.reset(seed=seed)
    records: list[tuple[Any, ...]] = [(obs, 0.0, False, False, None)]
    done = False
    for action in actions:
        if done:
            obs, _ = env.reset()
            records.append((obs, 0.0, False, False, None))
            done = False
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            records.append((obs, reward, terminated, truncated, info))
            done = terminated or truncated
    return records
