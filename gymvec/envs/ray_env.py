"""``RayEnv``: a batch of sub-envs on Ray actors, across the nodes of a cluster.

The same batched env as ``SerialEnv`` and ``ParallelEnv`` (one engine, one batching code
path); only the engine's executor differs: ``backends.ray.executor.RayExecutor``, one Ray actor
per worker, each holding its ``envs_per_worker`` sub-envs on its node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from gymvec.common.faults import Restart, parse_on_fault
from gymvec.envs.batched import BatchedEnvBase
from gymvec.options import TENSORDICT_API, check_start_method, check_timeout, suggest_keywords
from gymvec.specs import DeviceLike
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.layout import check_count

if TYPE_CHECKING:  # Ray is imported only when a RayEnv is built
    from gymvec.backends.ray.executor import RayExecutor


class RayEnv(BatchedEnvBase):
    """Sub-envs on Ray actors: one actor per worker, ``envs_per_worker`` sub-envs each.

    Args:
        num_workers: number of Ray actors.
        create_env_fn: callable returning an EnvBase or a gymnasium.Env (cloudpickled to the
            actors: lambdas and closures work), or a list of them, one per worker
            (multi-task) or one per sub-env.
        envs_per_worker: sub-envs held by each actor, or a list of ``num_workers`` counts.
            The batch size is their total.
        create_env_kwargs: kwargs for ``create_env_fn`` (a dict or a list of dicts).
        address: the Ray cluster to join when Ray is not initialised in this process yet
            (``"auto"``: the one ``ray start`` runs on this machine); None starts a local
            Ray (without the dashboard). A running Ray (``ray.is_initialized()``) is used as
            it is.
        worker_processes: processes that step an actor's sub-envs on its node, the actor's
            own included (1: the actor steps them itself; more: worker processes beside it,
            sharing the actor's buffers through shared memory, as ``ParallelEnv``'s do).
        actor_options: passed to the actors' ``.options()`` (``num_cpus`` defaults to 1;
            ``runtime_env``, ``resources``...).
        placement: "spread" (a placement group that puts the actors on distinct nodes where
            the cluster has them), "strict_spread" (distinct nodes or nothing), "pack", or
            None (Ray's default scheduling, no placement group).
        startup_timeout: seconds for the placement group and the actors to be ready.
        mp_start_method: how an actor starts its worker processes ("spawn", default).
        timeout: seconds a reset, step or request may take (None: as long as it takes); past
            it, ``SubEnvTimeoutError`` naming the busy workers and sub-envs, and the env
            refuses further calls; ``close()`` then kills the actors within seconds.
        device: where outputs live.
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart``: with restarts, a
            sub-env that raises is rebuilt in its actor, and an actor that dies or outlasts
            ``timeout`` in a step or reset is replaced by a new one in its placement bundle,
            its rows reported as faults (see ``docs/faults.md``).

    A step is one remote call per actor carrying that actor's actions, and the results
    come back as arrays; trajectories are those of ``SerialEnv`` for the same seeds and
    actions. An actor that dies (killed, its node lost) raises :class:`gymvec.WorkerError`
    naming the worker and its node under ``on_fault="raise"``, and is replaced by a new one
    under ``"restart"`` (docs/faults.md); ``close()`` kills the actors and removes the
    placement group. Ray stays initialised after ``close()`` (it belongs to the process).

    Example:
        >>> import os
        >>> os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # doctest: +SKIP
        >>> import ray  # doctest: +SKIP
        >>> _ = ray.init(num_cpus=2, include_dashboard=False)  # doctest: +SKIP
        >>> from gymvec import GymEnv, RayEnv
        >>> env = RayEnv(2, lambda: GymEnv("CartPole-v1"), envs_per_worker=4)  # doctest: +SKIP
        >>> env.set_seed(0)  # doctest: +SKIP
        >>> env.reset()["observation"].shape  # doctest: +SKIP
        torch.Size([8, 4])
        >>> env.close()  # doctest: +SKIP
    """

    @suggest_keywords
    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        *,
        envs_per_worker: int | Sequence[int] = 1,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        address: str | None = None,
        worker_processes: int = 1,
        actor_options: dict | None = None,
        placement: str | None = "spread",
        startup_timeout: float = 120.0,
        mp_start_method: str | None = None,
        timeout: float | None = None,
        device: DeviceLike = None,
        on_fault: str | Restart = "raise",
    ) -> None:
        from gymvec.backends.ray.executor import RayOptions, import_ray, ray_backend

        import_ray()  # before anything is built: without Ray, say how to install it
        policy = parse_on_fault(on_fault)
        check_count("num_workers", num_workers)
        options = RayOptions(
            address=address,
            worker_processes=worker_processes,
            actor_options=dict(actor_options or {}),
            placement=placement,
            startup_timeout=startup_timeout,
            start_method=check_start_method(mp_start_method or TENSORDICT_API.start_method),
        )
        self.ray_options = options
        factories = SubEnvFactories(num_workers, create_env_fn, create_env_kwargs, envs_per_worker)
        timeout = check_timeout(timeout, False)
        super().__init__(
            factories, ray_backend(options), device=device, timeout=timeout, on_fault=policy
        )
        try:
            _ = self.engine.executor  # the actors start now: worker_nodes is known from here on
        except BaseException:
            self.engine.close()
            raise

    @property
    def worker_nodes(self) -> list[str]:
        """The Ray node id of each worker's actor, in worker order."""
        self._check_open()
        executor = cast("RayExecutor", self.engine.executor)  # (what ray_backend starts)
        return executor.node_ids
