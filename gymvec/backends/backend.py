"""Where an engine's buffers live and where its sub-envs run: :class:`Backend`.

A backend makes the shared memory and, from an :class:`ExecutorStart` (what to build and
where the rows go), starts the executor. It never sees the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gymvec.backends.executor import Executor, SharedMemory
from gymvec.backends.local import LocalExecutor
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.layout import WorkerLayout
from gymvec.subenvs.probe import KeptEnv
from gymvec.wire.buffers import MemmapMemory, private_memory

EnvFn = Callable[[], Any]


@dataclasses.dataclass(frozen=True)
class ExecutorStart:
    """What a backend needs to start an executor: each worker's sub-env factories (worker
    0's first one hands over the env built to learn the layout where ``Backend.first_here``
    kept it), each worker's rows, and the shared memory."""

    worker_env_fns: list[list[EnvFn]]
    bounds: list[tuple[int, int]]  # per worker, its rows (unplanned: its sub-envs)
    shared: SharedMemory | None  # None: unplanned (see below)
    sub_env_sizes: list[tuple[int, ...]] | None  # per worker, the rows each of its sub-envs fills

    @classmethod
    def unplanned(cls, factories: SubEnvFactories) -> ExecutorStart:
        """A start in two phases, where the sub-envs' sizes are not known before they are
        built: the executor builds them (``bounds``: each worker's sub-envs) and reports
        them (``Executor.sub_env_summaries``); the engine then lays the buffers out and
        hands them over (``Executor.attach``)."""
        fns = [factories.worker_env_fns(w) for w in range(factories.num_workers)]
        return cls(fns, list(factories.worker_bounds), None, None)

    @classmethod
    def of(
        cls,
        factories: SubEnvFactories,
        layout: WorkerLayout,
        shared: SharedMemory,
        kept: KeptEnv,
    ) -> ExecutorStart:
        """Each worker's factories, sub-env 0's handing over ``kept`` where it holds an env;
        rows as ``layout`` plans them."""
        fns = [factories.worker_env_fns(w) for w in range(factories.num_workers)]
        if kept.env is not None:
            fns[0] = [kept.first_of(fns[0][0]), *fns[0][1:]]
        rows = [layout.sub_env_sizes_of(w) for w in range(layout.num_workers)]
        return cls(fns, list(layout.worker_rows), shared, rows)


@dataclasses.dataclass
class Backend:
    """Where an engine's buffers live and where its sub-envs run.

    ``new_memory(nbytes)`` makes a block; ``start(ExecutorStart)`` starts the executor;
    ``release()`` frees what the memory holds beyond the process (a memmap file).
    ``collect_on_exit``: stop the executor when the engine is garbage (worker processes).
    ``first_here``: sub-env 0 runs in this process, so the env built to learn the layout
    can become sub-env 0. ``late_memory``: how a block is made that an executor started
    unplanned (see ``ExecutorStart.unplanned``) can still hand to its workers (default:
    ``new_memory``).
    """

    name: str
    new_memory: Callable[[int], Any]
    start: Callable[[ExecutorStart], Executor]
    release: Callable[[], None] = lambda: None
    collect_on_exit: bool = False
    first_here: bool = False
    late_memory: Callable[[int], Any] | None = None


def serial_backend() -> Backend:
    """Sub-envs stepped one after the other in this process, in one group."""

    def start(plan: ExecutorStart) -> Executor:
        # One group for all sub-envs: in one process, workers would only add loop overhead.
        fns = [fn for fns in plan.worker_env_fns for fn in fns]
        if plan.sub_env_sizes is None:
            return LocalExecutor.build([fns], [0], plan.shared)
        rows = [size for sizes in plan.sub_env_sizes for size in sizes]
        return LocalExecutor.build([fns], [0], plan.shared, rows=[rows])

    return Backend("serial", private_memory, start, first_here=True)


def process_backend(options: Any, memmap: bool = False) -> Backend:
    """Sub-envs in worker processes (``options``: a ``ProcessOptions``), buffers in shared
    memory (or, with ``memmap``, in a temporary file)."""
    from gymvec.backends.processes.executor import (
        ProcessExecutor,
        refuse_start_while_importing_main,
    )
    from gymvec.wire.buffers import SHM_DIRECTORY, shared_memory

    refuse_start_while_importing_main()  # before anything is built

    memmaps: list[MemmapMemory] = []

    def new_memory(nbytes: int) -> Any:
        if not memmap:
            return shared_memory(nbytes)
        memory = MemmapMemory(nbytes)
        memmaps.append(memory)
        return memory

    def late_memory(nbytes: int) -> Any:
        # Workers that run already take a block through its descriptor (an anonymous
        # mapping reaches only those started after it); /dev/shm keeps it in memory.
        memory = MemmapMemory(nbytes, directory=None if memmap else SHM_DIRECTORY)
        memmaps.append(memory)
        return memory

    def start(plan: ExecutorStart) -> Executor:
        return ProcessExecutor(
            plan.worker_env_fns, plan.bounds, plan.shared, options, plan.sub_env_sizes
        )

    def release() -> None:
        for memory in memmaps:
            memory.release()

    backend = Backend(
        "processes",
        new_memory,
        start,
        release,
        collect_on_exit=True,
        first_here=bool(options.local_worker),
        late_memory=late_memory,
    )
    backend.memmaps = memmaps  # type: ignore[attr-defined]
    return backend
