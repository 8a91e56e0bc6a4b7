"""The ``blocks`` case: a vectorized env (gymnasium's ``vector_entry_point``) as gymvec blocks,
one per worker, against the same vector env alone in one process and envpool's C++ pool.

    python -m gymvec.bench --case blocks
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from gymvec.bench.runners.bare import FREE_LAG, BareParallel
from gymvec.bench.runners.base import (
    Runner,
    RunnerOptions,
    VectorEnvRunner,
    register_runner,
)


@register_runner("vector-entry-point")
def _vector_entry_point(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The id's own vector env over every row, in this process (one core)."""
    return VectorEnvRunner(gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point"))


@register_runner("gymvec-blocks")
def _gymvec_blocks(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """One block per worker process, each the id's vector env over its share of the rows."""
    from gymvec import make_vec

    envs = make_vec(
        env_id, num_envs, vectorization_mode="vector_entry_point", num_workers=options.num_workers
    )
    return VectorEnvRunner(envs)


def _bare_blocks_loop(env_id: str, num_envs: int, options: RunnerOptions, lag: int) -> Runner:
    workers = options.num_workers or 1
    if num_envs % workers:
        raise ValueError(f"bare-blocks: {num_envs} rows do not split over {workers} workers")
    rows = num_envs // workers
    make = functools.partial(gym.make_vec, env_id, rows, vectorization_mode="vector_entry_point")
    loop = BareParallel([make] * workers, workers, lag=lag, block_rows=rows, copy_out=False)
    return VectorEnvRunner(loop)


@register_runner("bare-blocks")
def _bare_blocks(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The framework-free reference of gymvec-blocks: the same blocks, the calling process
    stepping one and a process per other worker the others, in lock-step, the batch handed
    out as views of the shared memory, copied nowhere (see ``runners.bare``)."""
    return _bare_blocks_loop(env_id, num_envs, options, lag=0)


@register_runner("bare-blocks-free")
def _bare_blocks_free(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """bare-blocks whose processes do not wait for each other (``bare-free``'s rule): what
    the machine gives these blocks at all, no lock-step runner can be faster."""
    return _bare_blocks_loop(env_id, num_envs, options, lag=FREE_LAG)


class EnvpoolRunner(Runner):
    """envpool's gymnasium API (it autoresets itself; seeded when made)."""

    def __init__(self, env_id: str, num_envs: int, threads: int) -> None:
        import envpool

        self.make = lambda seed: envpool.make_gymnasium(
            env_id, num_envs=num_envs, num_threads=threads, seed=seed
        )
        self.env: Any = None

    def reset(self, seed: int) -> None:
        if self.env is not None:
            self.env.close()
        self.env = self.make(seed)
        self.env.reset()

    def step(self, actions: Any) -> None:
        self.env.step(actions)

    def prepare_actions(self, actions: Any) -> list[Any]:
        return [np.asarray(a, dtype=np.int32) for a in actions]

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


@register_runner("envpool")
def _envpool(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """envpool (``pip install envpool``), as many threads as gymvec has workers."""
    try:
        import envpool  # noqa: F401
    except ImportError as e:
        raise ImportError("envpool is not installed: pip install envpool") from e
    return EnvpoolRunner(env_id, num_envs, options.num_workers or 1)
