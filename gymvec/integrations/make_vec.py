"""``make_vec`` for registered gymnasium ids, and gymvec inside ``gymnasium.make_vec``.

Two ways in:

* ``gymvec.make_vec("CartPole-v1", 8, backend="parallel")`` builds a gymvec vector env for any
  registered id, including ids registered at run time in this process: the sub-envs are built
  from the id's ``EnvSpec``, which travels to spawned workers, so they need no registration.
* ``gymnasium.make_vec("gymvec:gymvec/CartPole-v1", num_envs=8)``: gymvec registers a derived
  id ``gymvec/<id>`` (``gymvec-<namespace>/<name>`` for namespaced ids) whose
  ``vector_entry_point`` is :func:`vector_entry_point` (see ``gymnasium_ids``). gymvec options
  (``num_workers``, ``autoreset_mode``, ``output``, ``local_worker``, ``backend``,
  ``context``, ``timeout``) can be passed as keyword arguments of ``gymnasium.make_vec``; the
  rest go to the env.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

if TYPE_CHECKING:  # importing gymvec registers the ids: torch is not imported for that
    from gymvec.vector.vector_env import GymnasiumVectorEnv

BACKENDS = ("serial", "parallel", "ray")
_GYMVEC_OPTIONS = (
    "backend",
    "num_workers",
    "autoreset_mode",
    "output",
    "local_worker",
    "context",
    "batch_size",
    "timeout",
    "ray_options",
)


def make_vec(
    env_id: str | EnvSpec,
    num_envs: int = 1,
    *,
    backend: str = "parallel",
    num_workers: int | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    output: str = "numpy",
    local_worker: bool | None = None,
    context: str | None = None,
    batch_size: int | None = None,
    timeout: float | None = None,
    ray_options: dict | None = None,
    **env_kwargs: Any,
) -> GymnasiumVectorEnv:
    """``num_envs`` copies of a registered gymnasium env as a gymvec vector env.

    Args:
        env_id: a registered id (or an ``EnvSpec``).
        num_envs: number of sub-envs.
        backend: "parallel" (worker processes), "serial" (this process) or "ray" (Ray
            actors, as ``RayEnv``; needs Ray: ``pip install ray``).
        num_workers: worker processes for the parallel backend (default: usable cores);
            Ray actors for the ray backend (default: one per alive node of the cluster).
        autoreset_mode: "next_step", "same_step" or "disabled".
        output: "numpy" or "torch".
        local_worker: parallel backend: step a share of the sub-envs in this process.
        context: parallel backend: the start method of the workers ("fork", "spawn",
            "forkserver"; default: multiprocessing's). Ids registered at run time work with
            every one of them: the id's ``EnvSpec`` travels to the workers.
        batch_size: first-ready batches of this many sub-envs (``async_reset``,
            ``send(actions, env_id)``, ``recv()``; default ``num_envs``).
        timeout: parallel and ray backends: as ``ParallelVectorEnv``'s and ``RayEnv``'s (the
            serial backend refuses one).
        ray_options: ray backend: ``RayEnv``'s options as a dict (``address``,
            ``worker_processes``, ``actor_options``, ``placement``, ``startup_timeout``).
        **env_kwargs: passed to ``gymnasium.make`` (``max_episode_steps``, ``render_mode``...).

    Example:
        >>> import gymvec
        >>> envs = gymvec.make_vec("CartPole-v1", 4, backend="serial")
        >>> envs.reset(seed=0)[0].shape
        (4, 4)
        >>> envs.close()
    """
    from gymvec.vector.dropin import ParallelVectorEnv, SerialVectorEnv

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
    spec = gym.spec(env_id) if isinstance(env_id, str) else env_id
    env_fns = [functools.partial(gym.make, spec, **env_kwargs)] * num_envs
    if backend == "ray":
        envs = _ray_vec(
            env_fns, num_workers, ray_options, autoreset_mode, output, batch_size, timeout
        )
    elif backend == "serial":
        if timeout is not None:
            raise ValueError(
                "timeout: the serial backend steps every sub-env in this process, where a "
                "timeout cannot cut them short; use backend='parallel'"
            )
        envs = SerialVectorEnv(
            env_fns, autoreset_mode=autoreset_mode, output=output, batch_size=batch_size
        )
    else:
        envs = ParallelVectorEnv(
            env_fns,
            num_workers=num_workers,
            autoreset_mode=autoreset_mode,
            output=output,
            local_worker=local_worker,
            context=context,
            batch_size=batch_size,
            timeout=timeout,
            # Arrays go through shared memory either way; False also takes the spaces that
            # gymnasium's AsyncVectorEnv cannot share (Graph, Sequence, custom), pickled.
            shared_memory=False,
        )
    envs.spec = spec
    return envs


def _ray_vec(
    env_fns: list,
    num_workers: int | None,
    ray_options: dict | None,
    autoreset_mode: Any,
    output: str,
    batch_size: int | None,
    timeout: float | None,
) -> GymnasiumVectorEnv:
    """The gymnasium face over an engine whose sub-envs run on Ray actors (torch-free)."""
    from gymvec.engine.engine import BatchEngine
    from gymvec.engine.factories import SubEnvFactories
    from gymvec.engine.ray_executor import RayOptions, connect, import_ray, ray_backend
    from gymvec.vector.dropin import spread
    from gymvec.vector.vector_env import GymnasiumVectorEnv

    import_ray()  # before anything is built: without Ray, say how to install it
    options = RayOptions(**(ray_options or {}))
    n = len(env_fns)
    if num_workers is None:
        ray = connect(options.address)
        num_workers = min(n, max(sum(1 for node in ray.nodes() if node["Alive"]), 1))
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers: expected a positive int, got {num_workers!r}")
    if num_workers > n:
        raise ValueError(
            f"num_workers: expected at most one worker per sub-env ({n}), got {num_workers}"
        )
    factories = SubEnvFactories(num_workers, env_fns, None, spread(n, num_workers))
    from gymvec.engine.processes import check_timeout

    engine = BatchEngine(factories, ray_backend(options), timeout=check_timeout(timeout, False))
    try:
        _ = engine.executor  # the actors start now
        return GymnasiumVectorEnv(
            engine, autoreset_mode=autoreset_mode, output=output, batch_size=batch_size
        )
    except BaseException:
        engine.close()
        raise


def vector_entry_point(base_id: str, num_envs: int = 1, **kwargs: Any) -> GymnasiumVectorEnv:
    """The ``vector_entry_point`` of gymvec's derived ids (called by ``gymnasium.make_vec``)."""
    options = {name: kwargs.pop(name) for name in _GYMVEC_OPTIONS if name in kwargs}
    return make_vec(base_id, num_envs, **options, **kwargs)
