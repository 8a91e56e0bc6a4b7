"""``make_vec`` and ``make_env``: Atari games in gymvec's batched envs, one ``AtariVectorEnv``
block per worker."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gymnasium.vector import AutoresetMode

from gymvec.atari.config import AtariConfig
from gymvec.atari.preprocessing import Preprocessing
from gymvec.atari.vector_env import AtariVectorEnv
from gymvec.common.faults import Restart, parse_on_fault
from gymvec.options import parse_autoreset_mode
from gymvec.subenvs.factories import BlockFactory
from gymvec.subenvs.layout import WorkerLayout, check_count

if TYPE_CHECKING:
    from gymvec.envs.batched import BatchedEnvBase
    from gymvec.vector.vector_env import GymnasiumVectorEnv

BACKENDS = ("serial", "parallel")


def block_factories(
    env_id: str,
    num_envs: int,
    num_workers: int,
    autoreset_mode: AutoresetMode,
    options: dict[str, Any],
) -> list[BlockFactory]:
    """One factory per worker, each building an ``AtariVectorEnv`` of that worker's share of
    the rows (``WorkerLayout.plan``: the shares gymvec gives workers of single envs), and
    saying its size, so that the engine plans the rows without building the blocks.

    ``options``: :class:`~gymvec.atari.preprocessing.Preprocessing`'s keywords and
    ``gym.make``'s. They are checked here, once, so that a bad one is raised in the caller's
    process.
    """
    AtariConfig.build(env_id, **options)
    shares = WorkerLayout.plan(num_envs, num_workers=num_workers).sub_envs_per_worker
    return [
        BlockFactory(
            functools.partial(
                AtariVectorEnv,
                env_id,
                share,
                autoreset_mode=autoreset_mode,
                # the engine copies every observation into its shared buffers at once
                copy=False,
                **options,
            ),
            share,
        )
        for share in shares
    ]


def _workers(backend: str, num_envs: Any, num_workers: int | None) -> int:
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    num_envs = check_count("num_envs", num_envs)
    if num_workers is None:
        num_workers = None if backend == "parallel" else 1
    return WorkerLayout.plan(num_envs, num_workers=num_workers).num_workers


@Preprocessing.in_signature
def make_vec(
    env_id: str,
    num_envs: int = 1,
    *,
    backend: str = "parallel",
    num_workers: int | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    batch_size: int | None = None,
    output: str = "numpy",
    on_fault: str | Restart = "raise",
    **options: Any,
) -> GymnasiumVectorEnv:
    """``num_envs`` Atari games as a gymvec gymnasium ``VectorEnv``: one ``AtariVectorEnv``
    block per worker (``ParallelVectorEnv``; ``SerialVectorEnv`` with ``backend="serial"``).

    With the same seeds it equals ``SyncVectorEnv`` over ``FrameStackObservation(
    AtariPreprocessing(gym.make(env_id, frameskip=1, **make_kwargs), ...), stack_size,
    padding_type=padding_type)``. ``options`` are the preprocessing keywords (see
    :class:`~gymvec.atari.preprocessing.Preprocessing`: ``AtariPreprocessing``'s and
    ``FrameStackObservation``'s, with their defaults) and ``gym.make``'s for ALE ids.
    ``on_fault``: "raise" (default), "restart" or a ``gymvec.Restart``; a block is one sub-env,
    so a fault rebuilds the worker's whole block and truncates all of its rows (see
    ``docs/faults.md``).

    Example:
        >>> from gymvec.atari import make_vec
        >>> envs = make_vec("ALE/Pong-v5", 4, num_workers=2)  # doctest: +SKIP
        >>> envs.reset(seed=0)[0].shape  # doctest: +SKIP
        (4, 4, 84, 84)
    """
    from gymvec.vector.dropin import ParallelVectorEnv, SerialVectorEnv

    workers = _workers(backend, num_envs, num_workers)
    mode = parse_autoreset_mode(autoreset_mode)
    parse_on_fault(on_fault)  # a bad one is refused before the options are checked
    factories = block_factories(env_id, num_envs, workers, mode, options)
    common: dict[str, Any] = dict(
        autoreset_mode=mode, batch_size=batch_size, output=output, on_fault=on_fault
    )
    if backend == "serial":
        return SerialVectorEnv(factories, **common)
    return ParallelVectorEnv(factories, num_workers=workers, **common)


@Preprocessing.in_signature
def make_env(
    env_id: str,
    num_envs: int = 1,
    *,
    backend: str = "parallel",
    num_workers: int | None = None,
    on_fault: str | Restart = "raise",
    **options: Any,
) -> BatchedEnvBase:
    """``num_envs`` Atari games as a gymvec tensordict batched env (``ParallelEnv``, or
    ``SerialEnv`` with ``backend="serial"``) of batch ``[num_envs]``, one ``AtariVectorEnv``
    block per worker; ``"observation"`` is ``[num_envs, stack_size, H, W]`` for gray frames.
    Options as :func:`make_vec`'s. Blocks are reset explicitly (DISABLED, with reset masks),
    as the tensordict side resets sub-envs."""
    from gymvec.envs.parallel_env import ParallelEnv
    from gymvec.envs.serial_env import SerialEnv

    workers = _workers(backend, num_envs, num_workers)
    parse_on_fault(on_fault)
    factories = block_factories(env_id, num_envs, workers, AutoresetMode.DISABLED, options)
    if backend == "serial":
        return SerialEnv(workers, factories, on_fault=on_fault)
    return ParallelEnv(workers, factories, on_fault=on_fault)
