"""``ParallelEnv``: the tensordict API over sub-envs in worker processes, shared memory
between them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from gymvec.common.faults import Restart, parse_on_fault
from gymvec.engine.engine import process_backend
from gymvec.envs.batched import BatchedEnvBase
from gymvec.options import TENSORDICT_API, process_options, suggest_keywords
from gymvec.specs import DeviceLike
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.layout import check_count


class ParallelEnv(BatchedEnvBase):
    """Sub-envs in worker processes; actions and observations through shared memory.

    Args:
        num_workers: number of workers; each is a process (except worker 0 with
            ``local_worker=True``).
        create_env_fn: callable returning an EnvBase or a gymnasium.Env (lambdas and closures
            work: factories travel with cloudpickle), or a list of them, one per worker.
        create_env_kwargs: kwargs for ``create_env_fn`` (a dict or a list of dicts).
        envs_per_worker: sub-envs stepped by each worker, or a list of ``num_workers`` counts
            (``[3, 4]``: 7 sub-envs, rows 0-2 in worker 0). The batch size is their total.
        shared_memory: must be True: buffers live in shared memory (kept for torchrl users).
        memmap: back the buffers with a temporary file instead of anonymous shared memory (the
            file is unlinked once made: none is left however the processes end).
        mp_start_method: "spawn", "fork" or "forkserver" (None: multiprocessing's default, as
            the drop-ins and gymnasium's ``AsyncVectorEnv``: "fork" on Linux up to Python
            3.13, where workers start without importing torch again).
        num_threads: torch threads of this process (unchanged if None).
        num_sub_threads: torch threads in each worker (1: no oversubscription).
        local_worker: step worker 0's sub-envs in this process while the others run (None:
            False, see docs/options.md).
        daemon: whether worker processes are daemonic (daemonic ones cannot start processes;
            None: False).
        startup_timeout: seconds the workers may take, all together, to start and build their
            sub-envs (``timeout``, if given, also bounds each worker's factories).
        spin: whether waits spin briefly before blocking (None: when every busy process has
            a core of its own, on x86).
        timeout: seconds a reset, step or call may take (None: as long as it takes). Past
            it, ``SubEnvTimeoutError`` names the sub-envs and workers still busy, the env
            refuses further calls, and ``close()`` ends the busy workers at once. Rules out
            ``local_worker``: no sub-env runs in this process.
        device: where outputs live.
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart(limit, window)``: a
            sub-env that raises, or whose worker dies or outlasts ``timeout``, is rebuilt
            and its rows read as truncated (API section 13, ``docs/faults.md``); the calling
            process's own share heals what raises, not its own death or a hang.

    A worker that raises or dies surfaces as :class:`gymvec.WorkerError` (with the worker's
    traceback when it raised); ``close()`` always stops every process.

    Example:
        >>> from gymvec import GymEnv, ParallelEnv
        >>> env = ParallelEnv(2, lambda: GymEnv("CartPole-v1"), envs_per_worker=2)
        >>> env.set_seed(0)
        >>> env.reset()["observation"].shape
        torch.Size([4, 4])
        >>> env.close()
    """

    @suggest_keywords
    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        *,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        envs_per_worker: int | Sequence[int] = 1,
        shared_memory: bool = True,
        memmap: bool = False,
        mp_start_method: str | None = None,
        num_threads: int | None = None,
        num_sub_threads: int | None = 1,
        local_worker: bool | None = None,
        daemon: bool | None = None,
        startup_timeout: float = 120.0,
        spin: bool | None = None,
        timeout: float | None = None,
        device: DeviceLike = None,
        on_fault: str | Restart = "raise",
    ) -> None:
        check_count("num_workers", num_workers)  # before it is used below
        policy = parse_on_fault(on_fault)
        if not shared_memory:
            raise ValueError("shared_memory=False is not supported: buffers are always shared")
        options, self.timeout = process_options(
            TENSORDICT_API,
            num_workers=num_workers,
            start_method=mp_start_method,
            daemon=daemon,
            local_worker=local_worker,
            timeout=timeout,
            startup_timeout=startup_timeout,
            spin=spin,
            num_sub_threads=num_sub_threads,
        )
        self.memmap = memmap
        self.mp_start_method = options.start_method
        self.num_sub_threads = num_sub_threads
        self.local_worker = options.local_worker
        self.daemon = options.daemon
        self.startup_timeout = startup_timeout
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        factories = SubEnvFactories(num_workers, create_env_fn, create_env_kwargs, envs_per_worker)
        backend = process_backend(options, memmap=memmap)
        super().__init__(factories, backend, device=device, timeout=self.timeout, on_fault=policy)
