"""Sub-envs in worker processes: the executor of ``ParallelEnv`` and of the drop-ins.

Each worker process steps its sub-envs against its rows of the shared buffers; per step, the
engine only writes the actions and one mode byte per sub-env, and :class:`ProcessExecutor`
wakes each worker once (see ``worker.py`` for the signalling). With ``local_worker`` the
calling process steps the first group itself while the worker processes step theirs: on a
machine with few cores, a parent that only waited would leave a core idle.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import multiprocessing.util
import os
import platform
import signal
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from gymvec.engine.commands import Extras
from gymvec.engine.executor import (
    Blocks,
    Call,
    Executor,
    LocalExecutor,
    OnLocalDone,
    group_indices,
    request_kwargs,
)
from gymvec.engine.subenvs import SubEnvSummary
from gymvec.engine.worker import (
    CMD,
    CMD_SEQ,
    DONE_SEQ,
    REPLY,
    STATUS,
    SYNC_WORDS,
    Command,
    PeerDied,
    Spin,
    Status,
    WorkerArgs,
    env_specs_payload,
    wait_for,
    worker_main,
)
from gymvec.errors import SpaceMismatchError, WorkerError, worker_error

WORKER_SPIN_S = 200e-6  # how long an idle worker spins before it blocks
PARENT_SPIN_S = 100e-6  # how long the parent spins on a worker's answer before it blocks


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class ProcessOptions:
    """How the worker processes are run (see ``ParallelEnv`` for each option)."""

    start_method: str = "spawn"
    daemon: bool = False
    local_worker: bool = False
    startup_timeout: float = 120.0
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


class WorkerHandle:
    """The parent's end of one worker process."""

    def __init__(self, index: int, start: int, stop: int, process, conn, wake, done, words):
        self.index, self.start, self.stop = index, start, stop
        self.process, self.conn = process, conn
        self.wake, self.done = wake, done
        self.words = words
        self.seq = 0
        self.answered = 0  # the last command whose answer was read
        self.summaries: list[SubEnvSummary] = []  # of its sub-envs, once ready

    def post(self, command: Command, payload: Any = None) -> None:
        self.seq += 1
        self.words[CMD] = int(command)  # an IntEnum costs numpy a few dunder lookups
        self.words[CMD_SEQ] = self.seq
        self.wake.release()
        if payload is not None:  # after the wake-up: the worker reads while we write
            self.conn.send_bytes(payload)

    def wait(self, spin: Spin, timeout: float | None) -> Any:
        """Wait for the answer to the last command; returns the reply (None if none)."""
        try:
            wait_for(self.words, DONE_SEQ, self.seq, self.done, spin, self.alive, timeout)
        except PeerDied:
            raise self.died() from None
        reply = None
        if self.words[REPLY]:
            try:
                reply = self.conn.recv()
            except (EOFError, OSError):
                raise self.died() from None
        self.answered = self.seq
        # int() first: numpy compares an IntEnum through slow generic paths (~5-20 us)
        if int(self.words[STATUS]) == Status.ERROR:
            raise self.raised(f"worker {self.index} raised", reply)
        return reply

    def raised(self, message: str, detail: tuple) -> WorkerError:
        """The error for what the worker sent when it raised: (traceback text, the name of
        the exception's class)."""
        text, type_name = detail
        return worker_error(
            message, worker_index=self.index, worker_traceback=text, type_name=type_name
        )

    def alive(self) -> bool:
        return self.process.is_alive()

    def died(self) -> WorkerError:
        self.process.join(0.1)
        code = self.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how = f"signal {signal.Signals(-code).name}"
        return WorkerError(
            f"worker {self.index} (pid {self.process.pid}) died ({how})",
            worker_index=self.index,
        )

    def release(self) -> None:
        """Close the parent's end: the pipe, the process object and the semaphores, whose
        /dev/shm entries go now (see ``unlink_semaphore``)."""
        self.conn.close()
        self.process.close()
        unlink_semaphore(self.wake)
        unlink_semaphore(self.done)
        self.process = self.wake = self.done = None


class ProcessExecutor(Executor):
    """Starts and drives the worker processes of a batch.

    Args:
        worker_env_fns: per worker, the factories of its sub-envs (rows ``worker_bounds``).
        worker_bounds: per worker, its row range.
        blocks: the shared buffers and control block.
        options: how the processes run.
    """

    def __init__(
        self,
        worker_env_fns: list[list[Callable[[], Any]]],
        worker_bounds: list[tuple[int, int]],
        blocks: Blocks,
        options: ProcessOptions,
    ):
        self.handles: list[WorkerHandle] = []
        self.local: LocalExecutor | None = None
        worker_spin_s, parent_spin_s = options.spin_seconds(len(worker_bounds))
        self.parent_spin = Spin(parent_spin_s)
        self.sync_memory = None
        self.concurrency = None  # a semaphore that max_concurrency groups share
        try:
            self._start(worker_env_fns, worker_bounds, blocks, options, worker_spin_s)
            if options.local_worker:  # built while the workers build theirs
                self.local = LocalExecutor.build([worker_env_fns[0]], [0], blocks)
            for handle in self.handles:
                self._wait_ready(handle, options.startup_timeout)
        except BaseException:
            self.close()
            raise
        local = [] if self.local is None else self.local.bounds
        self.bounds = local + [(h.start, h.stop) for h in self.handles]

    def _start(
        self,
        worker_env_fns: list[list[Callable[[], Any]]],
        worker_bounds: list[tuple[int, int]],
        blocks: Blocks,
        options: ProcessOptions,
        spin_s: float,
    ) -> None:
        ctx = mp.get_context(options.start_method)
        first_process = 1 if options.local_worker else 0
        n_proc = len(worker_bounds) - first_process
        self.sync_memory = ctx.RawArray("b", max(n_proc, 1) * SYNC_WORDS * 8)
        if options.max_concurrency is not None and options.max_concurrency < len(worker_bounds):
            self.concurrency = ctx.BoundedSemaphore(options.max_concurrency)
        # a forked worker inherits the registry; others get ids registered at run time here
        env_specs = None if ctx.get_start_method() == "fork" else env_specs_payload()
        for k, w in enumerate(range(first_process, len(worker_bounds))):
            start, stop = worker_bounds[w]
            parent_conn, child_conn = ctx.Pipe()
            wake, done = ctx.Semaphore(0), ctx.Semaphore(0)
            args = WorkerArgs(
                index=k,
                env_fns_payload=cloudpickle.dumps(worker_env_fns[w]),
                start=start,
                layout=blocks.layout,
                memory=blocks.memory,
                control_memory=blocks.control_memory,
                sync_memory=self.sync_memory,
                spin_s=spin_s,
                num_threads=options.num_sub_threads,
                env_specs_payload=env_specs,
                concurrency=self.concurrency,
            )
            process = ctx.Process(
                target=worker_main,
                name=f"gymvec-worker-{w}",
                args=(args, child_conn, wake, done),
                daemon=options.daemon,
            )
            words = worker_words(self.sync_memory, k)
            handle = WorkerHandle(w, start, stop, process, parent_conn, wake, done, words)
            self.handles.append(handle)
            process.start()
            child_conn.close()

    def summaries(self) -> list[SubEnvSummary]:
        local = [] if self.local is None else self.local.summaries()
        return local + [summary for handle in self.handles for summary in handle.summaries]

    def local_envs(self) -> list[Any]:
        return [] if self.local is None else self.local.local_envs()

    @staticmethod
    def _wait_ready(handle: WorkerHandle, timeout: float) -> None:
        ready = mp.connection.wait([handle.conn, handle.process.sentinel], timeout)
        if handle.conn in ready:
            try:
                kind, detail = cloudpickle.loads(handle.conn.recv_bytes())
            except (EOFError, OSError):
                raise handle.died() from None
            if kind == "mismatch":
                message, what = detail
                raise SpaceMismatchError(f"worker {handle.index}: {message}", kind=what)
            if kind == "error":
                raise handle.raised(f"worker {handle.index}: create_env_fn raised", detail)
            handle.summaries = detail
            return
        if ready:
            raise handle.died()
        raise WorkerError(
            f"worker {handle.index} did not start within {timeout} s", worker_index=handle.index
        )

    # ---- commands -----------------------------------------------------------------------------
    def send(self, call: Call) -> None:
        """Start the command on every worker; reset options and the object actions (each
        worker's rows) travel with it."""
        options, action_objects = call.options, call.action_objects
        if options is None and not action_objects:
            for handle in self.handles:
                handle.post(Command.RUN)
        elif not action_objects:  # one payload for all
            payload = cloudpickle.dumps((options, None))
            for handle in self.handles:
                handle.post(Command.RUN_WITH_PAYLOAD, payload)
        else:  # all pickled before any is posted: a value that cannot be starts nothing
            payloads = []
            for handle in self.handles:
                rows = {key: v[handle.start : handle.stop] for key, v in action_objects.items()}
                payloads.append(cloudpickle.dumps((options, rows)))
            for handle, payload in zip(self.handles, payloads):
                handle.post(Command.RUN_WITH_PAYLOAD, payload)

    def wait(
        self, call: Call, timeout: float | None = None, on_local_done: OnLocalDone | None = None
    ) -> dict[int, Extras]:
        """Collect every worker's answer. The share stepped in this process counts against
        ``timeout``, though it cannot be cut short: a wait that outlasts ``timeout`` raises
        TimeoutError after it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if call.extras is None:  # the local share runs once, even if the wait is resumed
            local = self.local
            call.extras = {}
            if local is not None:
                try:
                    call.extras = self._run_local(call)
                except Exception as exc:  # a sub-env of this process raised: raised once
                    call.local_error = exc  # every worker has answered (below)
            if on_local_done is not None and call.local_error is None:
                on_local_done(local.bounds[-1][1] if local is not None else 0)
            if deadline is not None and time.monotonic() > deadline and self.handles:
                raise TimeoutError(f"the local share outlasted the timeout of {timeout} s")
        error = self._collect(deadline, into=call.extras)
        if call.local_error is not None:  # the sub-env's own exception, as SerialEnv raises it
            raise call.local_error
        if error is not None:
            raise error
        return call.extras

    def _run_local(self, call: Call) -> dict[int, Extras]:
        if self.concurrency is None:
            return self.local.wait(call)
        with self.concurrency:
            return self.local.wait(call)

    def drain(self, call: Call, timeout: float | None = None) -> None:
        """End a call whose wait was interrupted: read the worker processes' answers and drop
        them, and the errors of their sub-envs; this process's share does not run again. A
        dead worker raises WorkerError. After a TimeoutError, calling again resumes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        error = self._collect(deadline, on_reply=_drop)
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
                    into.update(reply)
                else:
                    on_reply(handle, reply)
        return error

    # ---- requests -----------------------------------------------------------------------------
    def request_send(self, call: Call) -> None:
        """Post the request to the workers that hold some of ``call.indices``. Every worker's
        request is pickled before any is posted: a failure leaves no worker a step ahead."""
        offset = 0 if self.local is None else 1
        local, asked = None, []
        for group, positions in group_indices(call.indices, self.bounds):
            sub_indices = [call.indices[p] for p in positions]
            kwargs = request_kwargs(call, positions)
            if group < offset:
                local = (positions, sub_indices, kwargs)
            else:
                payload = cloudpickle.dumps((call.name, sub_indices, kwargs))
                asked.append((self.handles[group - offset], positions, payload))
        call.plan = (local, [(handle, positions) for handle, positions, _ in asked])
        call.results = [None] * len(call.indices)
        for handle, _, payload in asked:
            handle.post(Command.REQUEST, payload)

    def request_wait(self, call: Call, timeout: float | None = None) -> list:
        """The results, once every worker has answered (the local share runs meanwhile)."""
        from gymvec.engine.subenvs import run_request

        deadline = None if timeout is None else time.monotonic() + timeout
        local, asked = call.plan
        if local is not None and call.extras is None:  # while the workers run theirs
            call.extras = {}
            positions, sub_indices, kwargs = local
            try:
                answers = run_request(self.local.groups[0], call.name, sub_indices, kwargs)
                for p, answer in zip(positions, answers):
                    call.results[p] = answer
            except Exception as exc:
                call.local_error = exc
        positions_of = {handle.index: positions for handle, positions in asked}
        errors = [call.local_error]

        def on_reply(handle: WorkerHandle, reply: tuple) -> None:
            if reply[0] == "raise":  # the sub-env's own exception, with the worker's traceback
                _attach_worker_traceback(reply[1], f"raised in worker {handle.index}:\n{reply[2]}")
                errors.append(reply[1])
            else:
                for p, answer in zip(positions_of[handle.index], reply[1]):
                    call.results[p] = answer

        died = self._collect(deadline, on_reply, [handle for handle, _ in asked])
        error = next((e for e in errors if e is not None), died)
        if error is not None:
            raise error
        return call.results

    def close(self, timeout: float = 5.0) -> None:
        for handle in self.handles:
            if handle.process.is_alive():
                try:
                    handle.post(Command.CLOSE)
                except (OSError, ValueError):
                    pass
        for handle in self.handles:
            stop_process(handle.process, timeout)
            handle.release()
        self.handles = []
        unlink_semaphore(self.concurrency)
        self.sync_memory = self.concurrency = None
        local, self.local = self.local, None
        if local is not None:
            local.close()  # last: a sub-env's close may raise


def unlink_semaphore(semaphore: Any) -> None:
    """Remove the /dev/shm entry of a named multiprocessing semaphore now.

    Under spawn and forkserver, multiprocessing names each semaphore in /dev/shm and removes
    the name only when the semaphore is garbage-collected, which any reference left behind
    puts off (a kept WorkerError holds the frame of the wait on ``done``). Running that
    finalizer here removes the name once (the processes that opened the semaphore keep it);
    the later collection then does nothing. A semaphore without a name (fork unlinks at
    once) or without a finalizer to find is left to the collector, as before.
    """
    if getattr(getattr(semaphore, "_semlock", None), "name", None) is None:
        return
    registry = getattr(multiprocessing.util, "_finalizer_registry", {})
    for finalizer in list(registry.values()):
        ref = getattr(finalizer, "_weakref", None)
        if ref is not None and ref() is semaphore:
            finalizer()
            return


def _drop(handle: WorkerHandle, reply: Any) -> None:
    """What a drained call does with an answer (a command's extras or a request's results)."""


def worker_words(sync_memory: Any, k: int) -> Any:
    """The sync words of worker process ``k`` (see ``worker.py``)."""
    import numpy as np

    return np.frombuffer(sync_memory, dtype=np.int64)[k * SYNC_WORDS : (k + 1) * SYNC_WORDS]


def stop_process(process, timeout: float) -> None:
    """Join, then terminate, then kill: never wait unbounded."""
    if process._popen is None:  # never started
        return
    process.join(timeout)
    if process.exitcode is None:
        process.terminate()
        process.join(1.0)
    if process.exitcode is None:
        process.kill()
        process.join()


class RemoteTraceback(Exception):
    """The traceback text of an exception raised in a worker (shown as its cause)."""


def _attach_worker_traceback(error: BaseException, text: str) -> None:
    """Keep the worker's traceback on the exception re-raised here, whatever its type."""
    if hasattr(error, "add_note"):  # Python >= 3.11
        error.add_note(text)
    else:
        error.__cause__ = RemoteTraceback(text)


def check_start_method(start_method: str | None) -> str:
    """``start_method``, or a ValueError in multiprocessing's own words (which gymnasium's
    and SB3's classes pass on)."""
    if start_method not in (None, "spawn", "fork", "forkserver"):
        raise ValueError(
            f"mp_start_method: cannot find context for {start_method!r}; expected "
            f"'spawn', 'fork' or 'forkserver', got {start_method!r}"
        )
    return start_method or "spawn"
