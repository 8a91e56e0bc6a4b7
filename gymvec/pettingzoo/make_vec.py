"""``gymvec.pettingzoo.make_vec``: PettingZoo parallel envs as a gymvec vector env whose rows are
their agents, one :class:`AgentRowsBlock` per worker."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gymnasium.vector import AutoresetMode
from pettingzoo import ParallelEnv

from gymvec.common.cores import usable_cores
from gymvec.common.faults import Restart, parse_on_fault
from gymvec.options import parse_autoreset_mode
from gymvec.pettingzoo.agent_rows import AgentRowsBlock
from gymvec.pettingzoo.agents import check_parallel_env, close_env, common_spaces
from gymvec.subenvs.layout import check_count, spread

if TYPE_CHECKING:
    from gymvec.vector.vector_env import GymnasiumVectorEnv

BACKENDS = ("serial", "parallel")


def make_vec(
    env_fn: Callable[[], ParallelEnv],
    num_envs: int,
    *,
    backend: str = "parallel",
    num_workers: int | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    output: str = "numpy",
    on_fault: str | Restart = "raise",
    **options: Any,
) -> GymnasiumVectorEnv:
    """``num_envs`` PettingZoo parallel envs as one gymnasium vector env of ``num_envs * A``
    rows (``A = len(possible_agents)``): row ``e * A + k`` is agent ``possible_agents[k]`` of
    env ``e``, and ``envs.rows`` lists ``(e, agent)`` per row.

    The envs are spread over the workers as gymvec spreads sub-envs (``subenvs.layout.spread``:
    as even as they go, the larger shares last); each worker holds one
    :class:`AgentRowsBlock` of its envs. ``reset(seed=s)`` seeds env ``e`` with ``s + e``.
    Rows, autoresets and infos are the block's (see :class:`AgentRowsBlock`).

    Args:
        env_fn: builds one PettingZoo ``ParallelEnv`` (picklable for the parallel backend).
        num_envs: how many PettingZoo envs.
        backend: "parallel" (``ParallelVectorEnv``, worker processes) or "serial"
            (``SerialVectorEnv``, this process).
        num_workers: blocks (worker processes for "parallel"; default: one per usable core, at
            most one per env; 1 for "serial").
        autoreset_mode: "next_step", "same_step" or "disabled".
        output: "numpy" or "torch".
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart``: a faulted block is
            rebuilt and all of its rows (each agent of each of its envs) read as truncated
            (see ``docs/faults.md``).
        **options: ``ParallelVectorEnv``'s or ``SerialVectorEnv``'s own (``timeout``,
            ``context``, ``local_worker``...).

    One env is built here first, to check it and read its agents (a TypeError for an AEC env,
    a ValueError for agents of different spaces) before any worker starts.
    """
    from gymvec.subenvs.factories import BlockFactory
    from gymvec.vector.dropin import ParallelVectorEnv, SerialVectorEnv

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    num_envs = check_count("num_envs", num_envs)
    mode = parse_autoreset_mode(autoreset_mode)
    parse_on_fault(on_fault)  # a bad one is refused before an env is built
    if num_workers is None:
        num_workers = min(usable_cores(), num_envs) if backend == "parallel" else 1
    num_workers = check_count("num_workers", num_workers)
    if num_workers > num_envs:
        raise ValueError(
            f"num_workers: expected at most one worker per env ({num_envs}), got {num_workers}"
        )
    agents = _agents_of(env_fn)
    factories: list[Callable[[], Any]] = []
    first_env = 0
    for share in spread(num_envs, num_workers):
        block = functools.partial(
            AgentRowsBlock, env_fn, share, autoreset_mode=mode, first_env=first_env, copy=False
        )
        # (its size declared: the engine plans the rows without building it)
        factories.append(BlockFactory(block, share * len(agents)))
        first_env += share
    envs: GymnasiumVectorEnv
    common = dict(autoreset_mode=mode, output=output, on_fault=on_fault, **options)
    if backend == "serial":
        envs = SerialVectorEnv(factories, **common)
    else:
        envs = ParallelVectorEnv(factories, num_workers=num_workers, **common)
    # (set on this instance: the classes are gymvec's own, rows are what this function adds)
    rows = [(e, agent) for e in range(num_envs) for agent in agents]
    setattr(envs, "rows", rows)  # noqa: B010
    return envs


def _agents_of(env_fn: Callable[[], ParallelEnv]) -> list[str]:
    """``possible_agents`` of one env built here, after checking it can be rows."""
    env = env_fn()
    try:
        check_parallel_env(env)
        agents = list(env.possible_agents)
        common_spaces(env, agents)
        return agents
    finally:
        close_env(env)
