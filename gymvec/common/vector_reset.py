"""Resetting gymnasium ``VectorEnv``s: one seed per sub-env, and ``options["reset_mask"]``
checked as gymnasium checks it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
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


def check_reset_mask(mask: Any, n: int) -> np.ndarray:
    """``options["reset_mask"]`` checked as gymnasium's ``SyncVectorEnv.reset`` checks it, with
    its words (which its users and tests match)."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (n,):
        raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            "`options['reset_mask']` must contain a boolean array with at least one True "
            f"value, got reset_mask={mask}"
        )
    return mask
