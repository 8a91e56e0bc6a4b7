"""Resetting any gymnasium ``VectorEnv`` with one seed per sub-env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gymnasium.vector import VectorEnv


def reset_vector_env(
    env: VectorEnv,
    seed: int | Sequence[int | None] | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """``env.reset(seed=seed, options=options)``, where ``seed`` may be a list of per-sub-env
    seeds: gymnasium's vector envs (and gymvec's) take one, though ``VectorEnv`` declares an
    int."""
    return env.reset(seed=seed, options=options)  # type: ignore[arg-type]  # see the docstring
