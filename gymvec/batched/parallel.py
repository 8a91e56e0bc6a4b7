"""``ParallelEnv``: sub-envs in worker processes, data through shared memory.

Each worker process steps ``envs_per_worker`` sub-envs against its rows of the shared buffers;
per step, the parent only writes the actions and one mode byte per sub-env, and wakes each
worker once (see ``worker.py`` for the signalling). With ``local_worker=True`` the calling
process steps worker 0's sub-envs itself while the worker processes step theirs: on a machine
with few cores, a parent that only waited would leave a core idle.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import signal
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

from gymvec.batched.base import BatchedEnvBase, _check_count, group_indices
from gymvec.batched.buffers import MemmapMemory, shared_memory
from gymvec.batched.serial import LocalExecutor
from gymvec.batched.worker import (
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
    env_specs_payload,
    wait_for,
    worker_main,
)
from gymvec.errors import SpaceMismatchError, WorkerError, worker_error

if TYPE_CHECKING:
    from gymvec.specs import DeviceLike

WORKER_SPIN_S = 200e-6  # how long an idle worker spins before it blocks
PARENT_SPIN_S = 100e-6  # how long the parent spins on a worker's answer before it blocks


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class WorkerHandle:
    """The parent's end of one worker process."""

    def __init__(self, index: int, start: int, stop: int, process, conn, wake, done, words):
        self.index, self.start, self.stop = index, start, stop
        self.process, self.conn = process, conn
        self.wake, self.done = wake, done
        self.words = words
        self.seq = 0
        self.answered = 0  # the last command whose answer was read
        self.description: list[dict] = []  # describe_sub_env() of each sub-env, once ready

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


class ProcessExecutor:
    """Starts and drives the worker processes of a ParallelEnv."""

    def __init__(self, env: ParallelEnv):
        self.handles: list[WorkerHandle] = []
        self.local: LocalExecutor | None = None
        self._extras: dict | None = None  # answers collected so far by a wait
        self._local_error: Exception | None = None  # raised by this process's share
        self._stale = False  # a request's wait was interrupted: answers are left to read
        self.worker_spin_s = env.worker_spin_s
        self.parent_spin = Spin(env.parent_spin_s)
        self.sync_memory = None
        try:
            self._start(env)
        except BaseException:
            self.close()
            raise

    def _start(self, env: ParallelEnv) -> None:
        ctx = mp.get_context(env.mp_start_method)
        first_process = 1 if env.local_worker else 0
        n_proc = env.num_workers - first_process
        self.sync_memory = ctx.RawArray("b", max(n_proc, 1) * SYNC_WORDS * 8)
        all_words = np.frombuffer(self.sync_memory, dtype=np.int64)
        # a forked worker inherits the registry; others get ids registered at run time here
        env_specs = None if ctx.get_start_method() == "fork" else env_specs_payload()
        for k, w in enumerate(range(first_process, env.num_workers)):
            start, stop = env.worker_bounds[w]
            parent_conn, child_conn = ctx.Pipe()
            wake, done = ctx.Semaphore(0), ctx.Semaphore(0)
            process = ctx.Process(
                target=worker_main,
                name=f"gymvec-worker-{w}",
                args=(
                    k,
                    cloudpickle.dumps(env._worker_env_fns(w)),
                    start,
                    env.layout,
                    env._memory,
                    env._control_memory,
                    self.sync_memory,
                    child_conn,
                    wake,
                    done,
                    self.worker_spin_s,
                    env.num_sub_threads,
                    env_specs,
                ),
                daemon=env.daemon,
            )
            words = all_words[k * SYNC_WORDS : (k + 1) * SYNC_WORDS]
            handle = WorkerHandle(w, start, stop, process, parent_conn, wake, done, words)
            self.handles.append(handle)
            process.start()
            child_conn.close()
        if env.local_worker:  # built while the workers build theirs
            self.local = LocalExecutor.build(
                [env._worker_env_fns(0)], [0], env.buffers, env.control
            )
        for handle in self.handles:
            self._wait_ready(handle, env.startup_timeout)

    def describe(self) -> list[dict]:
        local = [] if self.local is None else self.local.describe()
        return local + [summary for handle in self.handles for summary in handle.description]

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
            handle.description = detail
            return
        if ready:
            raise handle.died()
        raise WorkerError(
            f"worker {handle.index} did not start within {timeout} s", worker_index=handle.index
        )

    @property
    def bounds(self) -> list[tuple[int, int]]:
        local = [] if self.local is None else self.local.bounds
        return local + [(h.start, h.stop) for h in self.handles]

    def send(self, options: dict | None, action_objects: dict[tuple, list] | None = None) -> None:
        """Start a command on every worker; ``options`` for its resets, ``action_objects``
        (the object action leaves' values, all sub-envs') travel with it, each worker's rows."""
        if self._stale:
            self.drain()
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
        if self.local is not None:
            self.local.send(options)

    def wait(
        self, timeout: float | None = None, on_local_done: Callable[[int], None] | None = None
    ) -> dict[int, dict]:
        """Collect every worker's answer. After a TimeoutError, calling again resumes.

        ``on_local_done(k)`` runs once this process has stepped its own share, rows ``[0, k)``
        (``k == 0`` without a local worker), before waiting for the worker processes.

        The share stepped in this process counts against ``timeout``, though it cannot be cut
        short: a wait that outlasts ``timeout`` raises TimeoutError after it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._extras is None:  # the local share runs once, even if the wait is resumed
            try:
                self._extras = self.local.wait() if self.local is not None else {}
            except Exception as exc:  # a sub-env of this process raised: raised once every
                self._extras, self._local_error = {}, exc  # worker has answered (below)
            if on_local_done is not None and self._local_error is None:
                on_local_done(self.local.bounds[-1][1] if self.local is not None else 0)
            if deadline is not None and time.monotonic() > deadline and self.handles:
                raise TimeoutError(f"the local share outlasted the timeout of {timeout} s")
        error = self._collect(deadline, self._extras.update)
        extras, self._extras = self._extras, None
        local_error, self._local_error = self._local_error, None
        if local_error is not None:  # the sub-env's own exception, as SerialEnv raises it
            raise local_error
        if error is not None:
            raise error
        return extras

    def drain(self, timeout: float | None = None) -> None:
        """End a command whose wait was interrupted: read the worker processes' answers and
        drop them, and the errors of their sub-envs; this process's share does not run again.
        A dead worker raises WorkerError. After a TimeoutError, calling again resumes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._extras, self._local_error = None, None
        error = self._collect(deadline, lambda reply: None)
        self._stale = False
        if error is not None and error.worker_traceback is None:  # died, not raised
            raise error

    def _collect(self, deadline: float | None, on_reply: Callable[[dict], Any]) -> Any:
        """Read the answer of each worker that has not answered the command in flight,
        handing the replies to ``on_reply``; returns the first WorkerError (None if none),
        once every worker has answered or is gone, so that no reply is left unread."""
        error = None
        for handle in self.handles:
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
                on_reply(reply)
        return error

    def request(self, name: str, indices: list[int], args: tuple, values: Sequence | None):
        """Run request ``name`` on the sub-envs at ``indices`` (``values``: one per index).

        Every worker's request is pickled before any is posted, and every answer is read
        before an error is raised: a failure leaves no worker a step ahead or an answer unread.
        """
        if self._stale:
            self.drain()
        results: list[Any] = [None] * len(indices)
        offset = 0 if self.local is None else 1
        local, asked = None, []
        for group, positions in group_indices(indices, self.bounds):
            sub_indices = [indices[p] for p in positions]
            extra = () if values is None else ([values[p] for p in positions],)
            if group < offset:
                local = (positions, sub_indices, values and extra[0])
            else:
                payload = cloudpickle.dumps((name, (sub_indices, *args, *extra)))
                asked.append((self.handles[group - offset], positions, payload))
        self._stale = True  # until every answer is read (an interrupt may come first)
        for handle, _, payload in asked:
            handle.post(Command.REQUEST, payload)
        error = None
        if local is not None:  # while the workers run theirs
            positions, sub_indices, local_values = local
            try:
                answers = self.local.request(name, sub_indices, args, local_values)
                for p, answer in zip(positions, answers):
                    results[p] = answer
            except Exception as exc:
                error = exc
        for handle, positions, _ in asked:
            try:
                reply = handle.wait(self.parent_spin, None)
            except WorkerError as exc:
                error = error or exc
                continue
            if reply[0] == "raise" and error is None:
                error = reply[1]
                _attach_worker_traceback(error, f"raised in worker {handle.index}:\n{reply[2]}")
            elif reply[0] == "ok":
                for p, answer in zip(positions, reply[1]):
                    results[p] = answer
        self._stale = False
        if error is not None:
            raise error
        return results

    def close(self, timeout: float = 5.0) -> None:
        for handle in self.handles:
            if handle.process.is_alive():
                try:
                    handle.post(Command.CLOSE)
                except (OSError, ValueError):
                    pass
        for handle in self.handles:
            _stop_process(handle.process, timeout)
            handle.conn.close()
            handle.process.close()
        self.handles = []
        self.sync_memory = None
        local, self.local = self.local, None
        if local is not None:
            local.close()  # last: a sub-env's close may raise


def _stop_process(process, timeout: float) -> None:
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
        memmap: back the buffers with a temporary file instead of anonymous shared memory.
        mp_start_method: "spawn" (default), "fork" or "forkserver".
        num_threads: torch threads of this process (unchanged if None).
        num_sub_threads: torch threads in each worker (1: no oversubscription).
        local_worker: step worker 0's sub-envs in this process while the others run.
        daemon: whether worker processes are daemonic (daemonic ones cannot start processes).
        startup_timeout: seconds a worker may take to build its sub-envs.
        spin: whether waits spin briefly before blocking (None: when every busy process has
            a core of its own, on x86).
        device: where outputs live.

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

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        create_env_kwargs: dict | Sequence[dict] | None = None,
        *,
        envs_per_worker: int | Sequence[int] = 1,
        shared_memory: bool = True,
        memmap: bool = False,
        mp_start_method: str | None = None,
        num_threads: int | None = None,
        num_sub_threads: int | None = 1,
        local_worker: bool = False,
        daemon: bool = False,
        startup_timeout: float = 120.0,
        spin: bool | None = None,
        device: DeviceLike = None,
    ) -> None:
        _check_count("num_workers", num_workers)  # before it is used below
        if not shared_memory:
            raise ValueError("shared_memory=False is not supported: buffers are always shared")
        if mp_start_method not in (None, "spawn", "fork", "forkserver"):
            # multiprocessing's own words first, which gymnasium's and SB3's classes pass on
            raise ValueError(
                f"mp_start_method: cannot find context for {mp_start_method!r}; expected "
                f"'spawn', 'fork' or 'forkserver', got {mp_start_method!r}"
            )
        self.memmap = memmap
        self.mp_start_method = mp_start_method or "spawn"
        self.num_sub_threads = num_sub_threads
        self.local_worker = bool(local_worker)
        self.daemon = daemon
        self.startup_timeout = startup_timeout
        if num_threads is not None:
            import torch

            torch.set_num_threads(num_threads)
        busy_processes = num_workers + (0 if self.local_worker else 1)
        if spin is None:
            # Spinning pays only with a core per process, and relies on x86's store order.
            spin = busy_processes <= usable_cores() and platform.machine() in ("x86_64", "AMD64")
        self.worker_spin_s = WORKER_SPIN_S if spin else 0.0
        self.parent_spin_s = PARENT_SPIN_S if spin else 0.0
        self._finalizer = None
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            envs_per_worker=envs_per_worker,
            device=device,
        )

    def _new_memory(self, nbytes: int) -> Any:
        if self.memmap:
            return MemmapMemory(nbytes)
        return shared_memory(nbytes)

    def _make_executor(self) -> ProcessExecutor:
        executor = ProcessExecutor(self)
        # Stop the workers and remove a memmap file even if the user never calls close()
        # (and before multiprocessing's own exit handler would wait for the workers forever).
        self._finalizer = weakref.finalize(self, _shutdown, executor, self._memmaps(), os.getpid())
        return executor

    def _close(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        super()._close()

    def _memmaps(self) -> list[MemmapMemory]:
        memories = (self._memory, self._control_memory)
        return [memory for memory in memories if isinstance(memory, MemmapMemory)]

    def _release_memory(self) -> None:
        for memory in self._memmaps():
            memory.release()


def _shutdown(executor: ProcessExecutor, memmaps: list[MemmapMemory], owner_pid: int) -> None:
    # A forked process inherits the env, garbage or not: its collector may free it there too,
    # but the workers and the memory are the owner's to end.
    if os.getpid() != owner_pid:
        return
    executor.close()
    for memory in memmaps:
        memory.release()
