"""Sub-envs in worker processes: the executor of ``ParallelEnv`` and of the drop-ins.

Each worker process steps its sub-envs against its rows of the shared buffers; per step, the
engine only writes the actions and one mode byte per sub-env, and :class:`ProcessExecutor`
wakes each worker once (see ``signals.py`` for the signalling). With ``local_worker`` the
calling process steps the first group itself while the worker processes step theirs: on a
machine with few cores, a parent that only waited would leave a core idle.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import multiprocessing.connection
import os
import platform
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import cloudpickle

from gymvec.backends import pickling
from gymvec.backends.executor import (
    Call,
    Executor,
    Meanwhile,
    Request,
    SharedMemory,
    group_indices,
    request_kwargs,
    void_owed_faults,
)
from gymvec.backends.local import LocalExecutor
from gymvec.backends.processes.handles import (  # noqa: F401  (WorkerHandle: processes' own name)
    CLOSE_GRACE_S,
    WorkerHandle,
    busy_error,
    local_timeout,
    raise_if_closing,
    refuse_start_while_importing_main,
    stop_workers,
    unlink_semaphore,
    wait_ready,
)
from gymvec.backends.processes.respawn import (
    EnvFnsOf,
    Respawner,
    WorkerStart,
    post_payload,
    starts_again,
)
from gymvec.backends.processes.rows import ProcessRows
from gymvec.backends.processes.signals import ROW_WORDS, SYNC_WORDS, Opcode, Spin, attach_message
from gymvec.common.cores import usable_cores
from gymvec.errors import WorkerError, expect_set
from gymvec.subenvs.group import SubEnvSummary
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire import calls
from gymvec.wire.buffers import SHM_DIRECTORY, MemmapMemory, as_buffer
from gymvec.wire.commands import Extras

if TYPE_CHECKING:
    from multiprocessing.synchronize import BoundedSemaphore, Semaphore

WORKER_SPIN_S = 200e-6  # how long an idle worker spins before it blocks
PARENT_SPIN_S = 100e-6  # how long the parent spins on a worker's answer before it blocks


@dataclasses.dataclass(frozen=True)
class ProcessOptions:
    """How the worker processes are run (see ``ParallelEnv`` for each option)."""

    start_method: str = "spawn"
    daemon: bool = False
    local_worker: bool = False
    startup_timeout: float = 120.0
    factory_timeout: float | None = None  # from a worker's first factory on (the drop-ins')
    spin: bool | None = None
    num_sub_threads: int | None = 1
    max_concurrency: int | None = None

    def spin_seconds(self, num_workers: int) -> tuple[float, float]:
        """(worker spin, parent spin): spinning pays only with a core per busy process, and
        relies on x86's store order."""
        spin = self.spin
        if spin is None:
            busy_processes = num_workers + (0 if self.local_worker else 1)
            on_x86 = platform.machine() in ("x86_64", "AMD64")
            spin = busy_processes <= usable_cores() and on_x86
        return (WORKER_SPIN_S, PARENT_SPIN_S) if spin else (0.0, 0.0)


def _units(sub_env_sizes: Sequence[Sequence[int]]) -> list[range] | None:
    """Per row, the rows of its sub-env (see ``ProcessRows``); None where each has one."""
    sizes = [size for sizes in sub_env_sizes for size in sizes]
    if all(size == 1 for size in sizes):
        return None
    units: list[range] = []
    for size in sizes:
        unit = range(len(units), len(units) + size)
        units += [unit] * size
    return units


class Pending:
    """What a :class:`ProcessExecutor` keeps of the call in flight while it waits (the call
    itself is a message): whether this process's share is still to run, the answers so far
    and the share's error; for a request, where it went (``local``, ``asked``)."""

    __slots__ = ("local_due", "extras", "local_error", "results", "local", "asked")

    def __init__(self) -> None:
        self.local_due = False  # this process's share is still to run
        self.extras: dict[int, Extras] = {}  # a command's answers so far
        self.local_error: Exception | None = None  # what this process's share raised
        self.results: list = []  # a request's results so far, one per index
        self.local: tuple | None = None  # a request's share here: (positions, indices, kwargs)
        self.asked: list[tuple[WorkerHandle, list[int]]] = []  # its workers, their positions


class ProcessExecutor(Executor):
    """Starts and drives the worker processes of a batch.

    Args:
        worker_env_fns: per worker, the factories of its sub-envs (rows ``worker_bounds``).
        worker_bounds: per worker, its row range (without ``shared``: its sub-envs).
        shared: the shared buffers and control block; None: a start in two phases, where
            the workers build their sub-envs and report them (:meth:`sub_env_summaries`),
            and wait for their rows (:meth:`attach`).
        options: how the processes run.
        sub_env_sizes: per worker, the rows of each of its sub-envs (default one each).
    """

    def __init__(
        self,
        worker_env_fns: list[list[Callable[[], Any]]],
        worker_bounds: list[tuple[int, int]],
        shared: SharedMemory | None,
        options: ProcessOptions,
        sub_env_sizes: Sequence[Sequence[int]] | None = None,
    ):
        self.handles: list[WorkerHandle] = []
        self.local: LocalExecutor | None = None
        self.options = options
        # (set with the local share: the run of its one group)
        self.run_local_group: Callable[[dict | None], dict[int, Extras]] | None = None
        self.closing = False  # close() began (maybe in another thread: see raise_if_closing)
        self.pending = Pending()  # the call in flight's (each send resets it in place)
        worker_spin_s, parent_spin_s = options.spin_seconds(len(worker_bounds))
        self.parent_spin = Spin(parent_spin_s)
        self.sync_memory: Any = None  # (a ctypes array)
        self.concurrency: BoundedSemaphore | None = None  # one that max_concurrency groups share
        # first-ready commands (see rows.py): the row words, the semaphore a
        # finished row posts
        self.rows_memory: Any = None
        self.ready: Semaphore | None = None
        self.shared, self.sub_env_sizes = shared, sub_env_sizes  # (a worker started again)
        self.respawner: Respawner | None = None  # deaths and hangs heal (see heal_deaths)
        deadline = time.monotonic() + options.startup_timeout  # this process's share included
        try:
            self._start(
                worker_env_fns, worker_bounds, shared, options, worker_spin_s, sub_env_sizes
            )
            if options.local_worker:  # built while the workers build theirs
                self.local = LocalExecutor.build(
                    [worker_env_fns[0]],
                    [worker_bounds[0][0]],
                    shared,
                    workers=[0],
                    rows=None if sub_env_sizes is None else [sub_env_sizes[0]],
                )
                # this process's share is that one group: its run, looked up once (per step)
                self.run_local_group = self.local.groups[0].run
            wait_ready(self.handles, deadline, options.startup_timeout, options.factory_timeout)
        except BaseException:
            self.close()
            raise
        if shared is not None:
            self._serve(shared, sub_env_sizes or [[1] * len(fns) for fns in worker_env_fns])

    def _serve(self, shared: SharedMemory, rows: Sequence[Sequence[int]]) -> None:
        """Every group is ready to run commands on ``shared`` (``rows``: per worker, the
        rows of each sub-env)."""
        local = [] if self.local is None else self.local.bounds
        self.bounds = local + [(h.start, h.stop) for h in self.handles]
        # Object observations come back with each row's message; object actions would need
        # one each way, which first-ready commands do not send.
        objects = bool(shared.layout.object_action_keys)
        self.first_ready: ProcessRows = ProcessRows(
            self.handles,
            self.local,
            as_buffer(self.rows_memory),
            self.ready,
            self.concurrency,
            self.parent_spin,
            objects,
            _units(rows),
        )

    def sub_env_summaries(self) -> list[SubEnvSummary]:
        local = [] if self.local is None else self.local.sub_env_summaries()
        return local + [summary for handle in self.handles for summary in handle.summaries]

    def attach(self, shared: SharedMemory, layout: WorkerLayout) -> None:
        """Hand each worker its rows of ``shared`` (and the row words, made now that the
        rows are known), lay this process's share out, and wait for every worker's ready."""
        options = self.options
        deadline = time.monotonic() + options.startup_timeout
        try:
            self.rows_memory = MemmapMemory(layout.num_rows * ROW_WORDS * 8, None, SHM_DIRECTORY)
            for handle in self.handles:
                handle.start, handle.stop = layout.worker_rows[handle.index]
                handle.send(attach_message(handle.start, shared, self.rows_memory))
            if self.local is not None:
                self.local.attach(shared, layout)
            wait_ready(self.handles, deadline, options.startup_timeout, None)
        except BaseException:
            self.close()
            raise
        self.shared = shared
        self.sub_env_sizes = [layout.sub_env_sizes_of(w) for w in range(layout.num_workers)]
        self._serve(shared, self.sub_env_sizes)

    def _start(
        self,
        worker_env_fns: list[list[Callable[[], Any]]],
        worker_bounds: list[tuple[int, int]],
        shared: SharedMemory | None,
        options: ProcessOptions,
        spin_s: float,
        rows: Sequence[Sequence[int]] | None,
    ) -> None:
        ctx = mp.get_context(options.start_method)
        first_process = 1 if options.local_worker else 0
        n_proc = len(worker_bounds) - first_process
        self.sync_memory = ctx.RawArray("b", max(n_proc, 1) * SYNC_WORDS * 8)
        if shared is not None:  # (else made once the rows are known: see attach)
            self.rows_memory = ctx.RawArray("b", shared.layout.num_envs * ROW_WORDS * 8)
        self.ready = ctx.Semaphore(0)
        if options.max_concurrency is not None and options.max_concurrency < len(worker_bounds):
            self.concurrency = ctx.BoundedSemaphore(options.max_concurrency)
        self.worker_start = WorkerStart(
            ctx,
            options.daemon,
            spin_s,
            options.num_sub_threads,
            self.sync_memory,
            self.ready,
            self.concurrency,
            _WORKERS.add,
        )
        for k, w in enumerate(range(first_process, len(worker_bounds))):
            self.handles.append(
                self.worker_start.start(
                    k,
                    w,
                    worker_env_fns[w],
                    worker_bounds[w],
                    shared,
                    self.rows_memory,
                    None if rows is None else rows[w],
                )
            )

    def summaries(self) -> list[SubEnvSummary]:
        local = [] if self.local is None else self.local.summaries()
        return local + [summary for handle in self.handles for summary in handle.summaries]

    def local_envs(self) -> list[Any]:
        return [] if self.local is None else self.local.local_envs()

    # ---- commands -----------------------------------------------------------------------------
    def send(self, call: calls.Command) -> None:
        """Start the command on every worker; reset options and the object actions (each
        worker's rows) travel with it. A worker known gone fails it before any is posted,
        unless deaths heal: it then starts again, sits this command out, and its rows come
        back as faults (see ``Respawner.before_send``)."""
        handles = self.handles
        for handle in handles:
            # (the test inline: this runs every step)
            if handle.failure is not None and not starts_again(self.respawner, handle):
                handle.check()
        if self.respawner is not None and self.respawner.owed:
            handles = [h for h in handles if h.index not in self.respawner.sitting_out]
        if self.first_ready.unsettled:
            self.first_ready.settle()
        if self.first_ready.owed:  # (tested here: a step makes no call for it)
            void_owed_faults(self.first_ready.owed, call)
        pending = self.pending  # (reset in place: this runs every step)
        pending.local_due, pending.extras, pending.local_error = True, {}, None
        options, action_objects = call.options, call.action_objects
        if options is None and not action_objects:
            for handle in handles:
                handle.post(Opcode.RUN)
        elif not action_objects:  # one payload for all
            payload = cloudpickle.dumps((options, None))
            for handle in handles:
                post_payload(handle, payload, self.respawner)
        else:  # all pickled before any is posted: a value that cannot be starts nothing
            payloads = []
            for handle in handles:
                rows = {key: v[handle.start : handle.stop] for key, v in action_objects.items()}
                payloads.append(cloudpickle.dumps((options, rows)))
            for handle, payload in zip(handles, payloads):
                post_payload(handle, payload, self.respawner)

    def wait(
        self, call: calls.Command, timeout: float | None = None, meanwhile: Meanwhile | None = None
    ) -> dict[int, Extras]:
        """Run this process's share of the command (once, even if the wait is resumed; its
        error is raised once every worker has answered), then collect every worker's answer.
        The share counts against ``timeout``, though it cannot be cut short: a wait that
        outlasts ``timeout`` raises TimeoutError after it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = self.pending
        try:
            if pending.local_due:  # (inline: this runs every step)
                pending.local_due = False
                local = self.local
                if local is not None:
                    try:
                        run = cast(
                            "Callable[[dict | None], dict[int, Extras]]", self.run_local_group
                        )
                        if self.concurrency is None:
                            pending.extras = run(call.options)
                        else:
                            with self.concurrency:
                                pending.extras = run(call.options)
                    except Exception as exc:  # a sub-env here raised: raised once every
                        pending.local_error = exc  # worker has answered
                    if deadline is not None and time.monotonic() > deadline and self.handles:
                        raise local_timeout(call, local, timeout)
                if meanwhile is not None:
                    meanwhile(0 if local is None else local.bounds[-1][1])
            extras = pending.extras
            try:
                error = self._collect(deadline, into=extras)
            except TimeoutError:
                raise busy_error(self.handles, call, timeout) from None
            respawner = self.respawner
            if respawner is not None and (error is not None or respawner.owed):
                error = respawner.after_command(error, extras)  # dead ones start again
            if pending.local_error is not None:  # the sub-env's own exception, as SerialEnv's
                raise pending.local_error
            if error is not None:
                raise error
        except Exception:
            raise_if_closing(self.closing)
            raise
        if self.closing:  # (tested here: a step makes no call for the guard)
            raise_if_closing(True)
        return extras

    def drain(self, call: Call, timeout: float | None = None) -> None:
        """End a call whose wait was interrupted: read the worker processes' answers and drop
        them, and the errors of their sub-envs; this process's share does not run again. A
        dead worker raises WorkerError. After a TimeoutError, calling again resumes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            error = self._collect(deadline, on_reply=_drop)
        except TimeoutError:
            raise busy_error(self.handles, call, timeout) from None
        except Exception:
            raise_if_closing(self.closing)
            raise
        if error is not None and error.worker_traceback is None:  # died, not raised
            raise error

    def _collect(
        self,
        deadline: float | None,
        on_reply: Callable[[WorkerHandle, Any], Any] | None = None,
        handles: list[WorkerHandle] | None = None,
        into: dict | None = None,
    ) -> Any:
        """Read the answer of each worker (of ``handles``, default all) that has not answered
        the call in flight, handing its reply to ``on_reply`` (default: ``into.update``, a
        command's extras); returns the first WorkerError (None if none), once every worker has
        answered or is gone, so that no reply is left unread."""
        error = None
        for handle in self.handles if handles is None else handles:
            if handle.answered == handle.seq:
                continue
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                reply = handle.wait(self.parent_spin, left)
            except WorkerError as exc:
                error = error or exc
                continue
            finally:
                if handle.answered != handle.seq and not handle.process.is_alive():
                    handle.answered = handle.seq
            if reply:
                if on_reply is None:
                    expect_set(into, "a command wait's extras").update(reply)
                else:
                    on_reply(handle, reply)
        return error

    def heal_deaths(self, env_fns_of: EnvFnsOf) -> bool:
        """From now on a worker that dies in a whole-batch command, or outlasts the engine's
        timeout (:meth:`end_busy`), starts again (see ``respawn.py``)."""
        self.respawner = self.first_ready.respawner = Respawner(self, env_fns_of)
        return True

    def end_busy(self, timeout: float) -> bool:  # (see Respawner.end_busy, ProcessRows.end_hung)
        respawner = expect_set(self.respawner, "a respawner (heal_deaths)")
        if self.first_ready.hung:
            return self.first_ready.end_hung(timeout)
        return respawner.end_busy(timeout)

    # ---- requests -----------------------------------------------------------------------------

    def request_send(self, call: Request) -> None:
        """Post the request to the workers that hold some of ``call.indices``. Every worker's
        request is pickled before any is posted: a failure leaves no worker a step ahead."""
        if self.first_ready.unsettled:
            self.first_ready.settle()
        offset = 0 if self.local is None else 1
        local, asked = None, []
        for group, positions in group_indices(call.indices, self.bounds):
            sub_indices = [call.indices[p] for p in positions]
            kwargs = request_kwargs(call, positions)
            if group < offset:
                local = (positions, sub_indices, kwargs)
            else:
                payload = pickling.dumps((call.name, sub_indices, kwargs))
                asked.append((self.handles[group - offset], positions, payload))
        pending = self.pending
        pending.local, pending.local_due, pending.local_error = local, local is not None, None
        pending.asked = [(handle, positions) for handle, positions, _ in asked]
        pending.results = [None] * len(call.indices)
        for handle, _, payload in asked:
            handle.post(Opcode.REQUEST, payload)

    def request_wait(self, call: Request, timeout: float | None = None) -> list:
        """The results, once every worker has answered (the local share runs meanwhile)."""
        from gymvec.subenvs.group import run_request

        deadline = None if timeout is None else time.monotonic() + timeout
        pending = self.pending
        local, asked, results = pending.local, pending.asked, pending.results
        if local is not None and pending.local_due:  # while the workers run theirs
            pending.local_due = False
            positions, sub_indices, kwargs = local
            share = expect_set(self.local, "the local share a request asked")
            try:
                answers = run_request(share.groups[0], call.name, sub_indices, kwargs)
                for p, answer in zip(positions, answers):
                    results[p] = answer
            except Exception as exc:
                pending.local_error = exc
        positions_of = {handle.index: positions for handle, positions in asked}
        errors = [pending.local_error]

        def on_reply(handle: WorkerHandle, reply: tuple) -> None:
            if reply[0] == "raise":  # the sub-env's own exception, with the worker's traceback
                errors.append(handle.raised(reply[1]))
            else:
                for p, answer in zip(positions_of[handle.index], reply[1]):
                    results[p] = answer

        try:
            died = self._collect(deadline, on_reply, [handle for handle, _ in asked])
        except TimeoutError:
            raise busy_error(self.handles, call, timeout) from None
        except Exception:
            raise_if_closing(self.closing)
            raise
        error = next((e for e in errors if e is not None), died)
        if error is not None:
            raise error
        return results

    # ---- first-ready commands (see rows.py) ---------------------------------------------
    def send_some(self, rows: Sequence[int]) -> None:
        self.first_ready.send_some(rows)

    def resend_some(self, rows: Sequence[int]) -> None:
        self.first_ready.resend_some(rows)

    def wait_some(self, take: calls.Take) -> dict[int, Any]:
        try:
            return self.first_ready.wait_some(take)
        except Exception:
            raise_if_closing(self.closing)
            raise

    def take_lost(self) -> list[int]:
        return self.first_ready.take_lost()

    def add_info_fields_in_flight(self, places: dict) -> bool:
        return self.first_ready.add_info_fields_in_flight(places)

    # ---- lifetime -----------------------------------------------------------------------------
    def close(self, timeout: float = CLOSE_GRACE_S) -> None:
        """Stop every worker at once (see ``stop_workers``: ``timeout`` + 2 s at most, however
        many there are), then close this process's share. A sub-env's close error is raised
        once everything is done (this process's share's first). Another thread's call that
        waits meanwhile raises ClosedEnvError."""
        self.closing = True
        error = stop_workers(self.handles, timeout)
        handles, self.handles = self.handles, []  # (a waiting thread keeps the old list)
        for handle in handles:
            handle.release()
        unlink_semaphore(self.concurrency)
        unlink_semaphore(self.ready)
        if isinstance(self.rows_memory, MemmapMemory):
            self.rows_memory.release()
        self.sync_memory = self.concurrency = self.rows_memory = self.ready = None
        local, self.local = self.local, None
        if local is not None:
            local.close()  # last: a sub-env's close may raise
        if error is not None:
            raise error


# The workers of this process (see _forget_workers_in_child).
_WORKERS: weakref.WeakSet = weakref.WeakSet()


def _forget_workers_in_child() -> None:
    """After a plain ``os.fork()``: the child inherits multiprocessing's list of this
    process's children, and at exit would SIGTERM the daemon ones among them (our workers,
    which are not its own) and try to join the others. They are the parent's: drop them."""
    children = getattr(mp.process, "_children", None)
    if children is not None:
        children.difference_update(list(_WORKERS))


os.register_at_fork(after_in_child=_forget_workers_in_child)


def _drop(handle: WorkerHandle, reply: Any) -> None:
    """What a drained call does with an answer (a command's extras or a request's results)."""


def check_timeout(timeout: float | None, local_worker: bool | None) -> float | None:
    """A ``timeout=`` option: None or positive seconds; it rules out ``local_worker`` (a
    sub-env stepped in the calling process could not be cut short)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout: expected None or a positive number of seconds, got {timeout!r}")
    if local_worker:
        raise ValueError(
            "timeout: local_worker=True steps sub-envs in the calling process, where a timeout "
            "cannot cut them short; leave local_worker unset (or False) with a timeout"
        )
    return float(timeout)


def default_start_method() -> str:
    """multiprocessing's default start method, without fixing it (``get_start_method()``
    would, and a later ``set_start_method()`` of the user's would then raise)."""
    return mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0]


def check_start_method(start_method: str | None) -> str:
    """``start_method``, or a ValueError in multiprocessing's own words (which gymnasium's
    and SB3's classes pass on)."""
    if start_method not in (None, "spawn", "fork", "forkserver"):
        raise ValueError(
            f"mp_start_method: cannot find context for {start_method!r}; expected "
            f"'spawn', 'fork' or 'forkserver', got {start_method!r}"
        )
    return start_method or "spawn"
