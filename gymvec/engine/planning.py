"""How a :class:`~gymvec.engine.engine.BatchEngine` starts: the buffers laid out from the
sub-env built here (``plan_from_probe``), or from the reports of the sub-envs built where they
run (``plan_from_workers``, a start in two phases); see docs/architecture.md."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gymvec.backends.backend import Backend, ExecutorStart
from gymvec.backends.executor import Executor, SharedMemory
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.kinds import SubEnvSummary
from gymvec.subenvs.layout import WorkerLayout
from gymvec.subenvs.probe import KeptEnv, heterogeneous, layout_of, probe
from gymvec.wire.buffers import Buffers
from gymvec.wire.commands import Control

# ``engine`` below: the BatchEngine being built (typed Any: engine.py imports this module),
# whose attributes these functions set.


def plan_from_probe(engine: Any, obs_lanes: int) -> list[SubEnvSummary]:
    """Lay the buffers out from the sub-env built here (one per task), whose rows every
    sub-env of its factory shares (see ``SubEnvFactories.rows_known``); the executor
    starts with them, on first use (or now, where the sub-envs have factories of their
    own: their spaces are checked then). Returns the summaries, one per row."""
    factories, backend = engine.factories, engine.backend
    # the env built for sub-env 0's layout, until it becomes sub-env 0
    probed, kept, worker_layout = probe(factories, engine.multi_task, backend.first_here)
    engine._kept = KeptEnv(kept)
    try:
        lay_out(engine, worker_layout, probed, obs_lanes, backend.new_memory)
    except BaseException:
        engine._kept.close()
        raise
    try:
        if factories.single_factory() or engine.multi_task:
            summaries = probed
        else:  # BlockFactories of their own: ask the sub-envs themselves
            summaries = engine.executor.summaries()
        engine.heterogeneous = heterogeneous(summaries, engine.multi_task, engine.worker_layout)
    except BaseException:
        engine.close()
        raise
    return summaries


def plan_from_workers(engine: Any, obs_lanes: int) -> list[SubEnvSummary]:
    """A start in two phases, where the sub-envs' sizes are unknown until they are built
    (blocks mix with single envs, say): the executor builds them where they run and
    reports each one; the buffers are laid out from those reports, then handed to the
    executor (``Executor.attach``). Nothing is built here, but in the serial backend."""
    factories, backend = engine.factories, engine.backend
    executor = engine.slot.started(backend.start(ExecutorStart.unplanned(factories)))
    try:
        reported = executor.sub_env_summaries()
        worker_layout = factories.layout.with_rows([s.rows for s in reported])
        summaries = [s for s in reported for _ in range(s.rows)]
        engine.heterogeneous = heterogeneous(summaries, False, worker_layout)
        lay_out(engine, worker_layout, summaries, obs_lanes, backend.late_memory)
        executor.attach(engine.shared, worker_layout)
    except BaseException:
        engine.close()
        raise
    return summaries


def lay_out(
    engine: Any,
    worker_layout: WorkerLayout,
    summaries: list[SubEnvSummary],
    obs_lanes: int,
    new_memory: Callable[[int], Any] | None,
) -> None:
    """The buffers and the control block of ``summaries`` (one per row)."""
    engine.worker_layout = worker_layout
    engine.num_envs = num_envs = worker_layout.num_rows  # rows: a block fills several
    engine.worker_bounds = list(worker_layout.worker_rows)
    engine.info_fields, engine.layout = layout_of(summaries, num_envs, obs_lanes)
    new_memory = new_memory or engine.backend.new_memory
    memory = new_memory(engine.layout.nbytes)
    control_memory = new_memory(Control.nbytes(num_envs))
    engine.buffers = Buffers(engine.layout, memory)
    engine.control = Control(num_envs, control_memory)
    engine.shared = SharedMemory(
        engine.layout, memory, control_memory, engine.buffers, engine.control
    )
    # (over the parts, not the engine: what holds the slot never keeps the engine alive)
    engine.slot.start = functools.partial(
        start_planned, engine.backend, engine.factories, worker_layout, engine.shared, engine._kept
    )


def start_planned(
    backend: Backend,
    factories: SubEnvFactories,
    worker_layout: WorkerLayout,
    shared: SharedMemory,
    kept: KeptEnv,
) -> Executor:
    """The executor of a planned start, with the factories' current kwargs (the sub-envs
    are built again so after ``BatchEngine.restart``)."""
    return backend.start(ExecutorStart.of(factories, worker_layout, shared, kept))
