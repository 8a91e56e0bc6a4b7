"""Worker processes started, and started again.

:class:`WorkerStart` starts one worker process in its slot (its sync words, its rows of the
shared memory); the executor starts every worker through it, and :class:`Respawner` starts
one again. With ``on_fault`` restarting (faults that heal, API section 13), the engine asks the
executor to heal deaths (``ProcessExecutor.heal_deaths``): a whole-batch command whose
answers find a worker dead (any signal, any exit, a SIGKILL from outside), or a worker that
outlasted the engine's ``timeout=`` (killed here, SIGKILL), gets a new process of the same
start method in its slot: same shared memory, its sub-envs built from the factories' current
kwargs, healing on (the ``heal_faults`` request). Every sub-env it held is reported as a fault
(``Extras.fault``: ``("death", "worker died: signal 11", None)`` or ``("timeout", "timed out
after 1.0 s", None)``), which the engine books as it books a sub-env that raised
(``engine/healing.py``). The other workers' answers of that command stand.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from gymvec.backends import pickling
from gymvec.backends.processes.handles import WorkerHandle, join_all, wait_ready
from gymvec.backends.processes.signals import (
    PARENT_ENDS,
    SYNC_WORDS,
    Opcode,
    Spin,
    WorkerArgs,
    env_specs_payload,
    sync_words,
)
from gymvec.backends.processes.worker import worker_main
from gymvec.errors import WorkerError
from gymvec.wire.commands import Extras

EnvFnsOf = Callable[[int], list[Callable[[], Any]]]  # worker -> its sub-envs' factories
REAP_WAIT_S = 5.0  # how long a killed worker is waited for before it is given up as a zombie


@dataclasses.dataclass
class WorkerStart:
    """What every worker process of an executor starts from, besides its own factories and
    rows: the context (start method), the sync words, the semaphores the workers share."""

    ctx: Any
    daemon: bool
    spin_s: float
    num_threads: int | None
    sync_memory: Any
    ready: Any
    concurrency: Any
    on_start: Callable[[Any], None]  # told of each process started (see executor._WORKERS)
    # the parent's gymnasium registry, for spawn and forkserver workers (a forked one has it)
    env_specs: bytes | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        fork = self.ctx.get_start_method() == "fork"
        self.env_specs = None if fork else env_specs_payload()

    def start(
        self,
        k: int,
        w: int,
        fns: list[Callable[[], Any]],
        bounds: tuple[int, int],
        shared: Any,
        rows_memory: Any,
        rows: Sequence[int] | None,
    ) -> WorkerHandle:
        """Start worker process ``k`` (worker ``w``, sync words ``k``) with the factories
        ``fns`` at ``bounds`` of ``shared`` (None: a start in two phases)."""
        ctx = self.ctx
        parent_conn, child_conn = ctx.Pipe()
        PARENT_ENDS.add(parent_conn)
        wake, done = ctx.Semaphore(0), ctx.Semaphore(0)
        args = WorkerArgs(
            index=k,
            env_fns_payload=pickling.dumps(fns),
            start=bounds[0],
            layout=None if shared is None else shared.layout,
            memory=None if shared is None else shared.memory,
            control_memory=None if shared is None else shared.control_memory,
            sync_memory=self.sync_memory,
            spin_s=self.spin_s,
            num_threads=self.num_threads,
            env_specs_payload=self.env_specs,
            concurrency=self.concurrency,
            rows_memory=rows_memory,
            ready=self.ready,
            rows=None if rows is None else tuple(rows),
        )
        process = ctx.Process(
            target=worker_main,
            name=f"gymvec-worker-{w}",
            args=(args, child_conn, wake, done),
            daemon=self.daemon,
        )
        words = sync_words(self.sync_memory, k)
        handle = WorkerHandle(w, bounds[0], bounds[1], process, parent_conn, wake, done, words)
        try:
            process.start()
        finally:
            child_conn.close()
        self.on_start(process)
        return handle


class Respawner:
    """Starts a worker process again where its old one died or hung (see the module
    docstring). ``executor``: the ``ProcessExecutor`` (typed Any: it imports this module);
    ``env_fns_of(w)``: worker ``w``'s factories, with their current kwargs."""

    def __init__(self, executor: Any, env_fns_of: EnvFnsOf):
        self.executor = executor
        self.env_fns_of = env_fns_of
        self.owed: dict[int, Extras] = {}  # faults of the workers started again at a send
        self.sitting_out: set[int] = set()  # those workers, which the command skips

    def before_send(self, handle: WorkerHandle) -> bool:
        """A command is about to go out and ``handle``'s worker is known dead (it died in a
        request, say): start it again now; it sits the command out, and its rows' faults
        come back with the command's answers. False where it cannot heal."""
        if handle.death is None:
            return False
        self.owed.update(self.respawn(handle, "death", f"worker died: {handle.death}"))
        self.sitting_out.add(handle.index)
        return True

    def after_command(self, error: WorkerError | None, extras: dict) -> WorkerError | None:
        """A whole-batch command's answers are in, with ``error`` (the first): start the
        workers found dead again, their rows' faults (and those owed since the send) into
        ``extras``. Returns ``error`` where a sub-env raised it (a group that cannot heal),
        None where it was a death."""
        if self.owed:
            extras.update(self.owed)
            self.owed, self.sitting_out = {}, set()
        if error is None:
            return None
        dead = [h for h in self.executor.handles if h.death is not None]
        for handle in dead:
            extras.update(self.respawn(handle, "death", f"worker died: {handle.death}"))
        return None if error.worker_traceback is None else error

    def end_busy(self, timeout: float) -> bool:
        """The command in flight outlasted the engine's ``timeout``: kill the workers still
        busy with it and start them again; their rows' faults join the command's answers.
        Returns True (the wait may resume)."""
        executor = self.executor
        busy = [handle for handle in executor.handles if handle.busy()]
        for handle in busy:
            if handle.process.exitcode is None:
                handle.process.kill()
        join_all([handle.process for handle in busy], time.monotonic() + REAP_WAIT_S)
        extras = executor.pending.extras
        for handle in busy:
            extras.update(self.respawn(handle, "timeout", f"timed out after {timeout} s"))
        return True

    def respawn(self, handle: WorkerHandle, kind: str, message: str) -> dict[int, Extras]:
        """Reap ``handle``'s process, start a new one in its slot, ready and healing; returns
        the faults of its rows."""
        executor = self.executor
        handle.process.join(REAP_WAIT_S)
        k = executor.handles.index(handle)
        w = handle.index
        bounds = (handle.start, handle.stop)
        for word in range(SYNC_WORDS):  # the new process counts its commands from zero
            handle.words[word] = 0
        sizes = executor.sub_env_sizes
        new = executor.worker_start.start(
            k,
            w,
            self.env_fns_of(w),
            bounds,
            executor.shared,
            executor.rows_memory,
            None if sizes is None else sizes[w],
        )
        executor.handles[k] = new
        handle.release()  # (once replaced: a failed start leaves it for close() to stop)
        executor.first_ready.handle_of_row[bounds[0] : bounds[1]] = [new] * (bounds[1] - bounds[0])
        options = executor.options
        deadline = time.monotonic() + options.startup_timeout
        wait_ready([new], deadline, options.startup_timeout, options.factory_timeout)
        rows = list(range(*bounds))
        new.post(Opcode.REQUEST, pickling.dumps(("heal_faults", rows, {"rebuilt": True})))
        new.wait(Spin(0.0), max(deadline - time.monotonic(), 0.0))
        return {row: Extras(fault=(kind, message, None)) for row in rows}


def starts_again(respawner: Respawner | None, handle: WorkerHandle) -> bool:
    """Whether ``handle``'s worker, known gone, started again before a send (see
    :meth:`Respawner.before_send`); False: the send raises its WorkerError."""
    return respawner is not None and respawner.before_send(handle)


def post_payload(handle: WorkerHandle, payload: bytes, respawner: Respawner | None) -> None:
    """Post a command with its payload; a worker found dead by the write is left for the
    wait to start again, where deaths heal."""
    try:
        handle.post(Opcode.RUN_WITH_PAYLOAD, payload)
    except WorkerError:
        if respawner is None or handle.death is None:
            raise
