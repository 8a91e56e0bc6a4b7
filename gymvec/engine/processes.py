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
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

from gymvec.engine.commands import Extras
from gymvec.engine.executor import (
    Blocks,
    Call,
    Executor,
    LocalExecutor,
    first_ready_objects_error,
    group_indices,
    request_kwargs,
    take_finished,
)
from gymvec.engine.subenvs import SubEnvSummary
from gymvec.engine.worker import (
    CMD,
    CMD_SEQ,
    DONE_SEQ,
    FIELDS,
    FINISHED,
    LIVENESS_POLL_S,
    REPLY,
    ROW_REPLY,
    ROW_STATUS,
    ROW_WORDS,
    STATUS,
    SYNC_WORDS,
    TICKET,
    Command,
    PeerDied,
    Spin,
    Status,
    WorkerArgs,
    env_specs_payload,
    sync_words,
    wait_for,
    worker_main,
)
from gymvec.errors import (
    MainModuleError,
    SpaceMismatchError,
    SubEnvTimeoutError,
    WorkerError,
    worker_error,
)

WORKER_SPIN_S = 200e-6  # how long an idle worker spins before it blocks
PARENT_SPIN_S = 100e-6  # how long the parent spins on a worker's answer before it blocks
_ERROR = int(Status.ERROR)
# The exit code of a spawned worker that found itself importing the main module (see
# refuse_start_while_importing_main); EX_CONFIG of sysexits.h.
MAIN_REIMPORT_EXIT = 78


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
        self.words[CMD] = command  # (an IntEnum: an int, as a memoryview item must be)
        self.words[CMD_SEQ] = self.seq
        self.wake.release()
        if payload is not None:  # after the wake-up: the worker reads while we write
            try:
                self.conn.send_bytes(payload)
            except OSError:  # its end of the pipe is gone: so is the worker
                raise self.died() from None

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
        if self.words[STATUS] == _ERROR:
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

    def busy(self) -> bool:
        """Whether the worker has not finished the last command posted to it."""
        return self.answered != self.seq and self.words[DONE_SEQ] < self.seq

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
        # first-ready commands (see worker.py): the row words, the semaphore a finished row
        # posts, the count of rows sent, and what was read but not yet handed out
        num_envs = blocks.layout.num_envs
        self.rows_memory = None
        self.ready = None
        self._tickets = 0
        self._sending = 0  # the ticket count when the last send_some began
        self._finished: dict[int, Any] = {}  # row -> its Extras, None, or its WorkerError
        # per row: its last ticket was gathered (bytes, whose items index faster than numpy's)
        self._gathered = bytearray(num_envs)
        self._messages: dict[int, Any] = {}  # row -> what its worker sent, read early
        self._lost: list[int] = []
        self._unsettled: set[WorkerHandle] = set()  # posted RUN_SOME, not yet seen idle
        # Object observations come back with each row's message; object actions would need
        # one each way, which first-ready commands do not send.
        self._objects = bool(blocks.layout.object_action_keys)
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
        self.local_stop = local[-1][1] if local else 0  # rows [0, local_stop) run here
        self.row_words = np.frombuffer(self.rows_memory, dtype=np.int64).reshape(
            num_envs, ROW_WORDS
        )
        # the same words as Python ints: a first-ready wait reads a few per row it checks
        self.row_ints = memoryview(self.rows_memory).cast("B").cast("q")
        self.handle_of_row: list[WorkerHandle | None] = [None] * num_envs
        for handle in self.handles:
            self.handle_of_row[handle.start : handle.stop] = [handle] * (handle.stop - handle.start)

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
        self.rows_memory = ctx.RawArray("b", blocks.layout.num_envs * ROW_WORDS * 8)
        self.ready = ctx.Semaphore(0)
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
                rows_memory=self.rows_memory,
                ready=self.ready,
            )
            process = ctx.Process(
                target=worker_main,
                name=f"gymvec-worker-{w}",
                args=(args, child_conn, wake, done),
                daemon=options.daemon,
            )
            words = sync_words(self.sync_memory, k)
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
            except (EOFError, OSError):  # it died before its first message
                raise start_failure(handle) from None
            if kind == "mismatch":
                message, what = detail
                raise SpaceMismatchError(f"worker {handle.index}: {message}", kind=what)
            if kind == "error":
                raise handle.raised(f"worker {handle.index}: create_env_fn raised", detail)
            handle.summaries = detail
            return
        if ready:
            raise start_failure(handle) from None
        raise WorkerError(
            f"worker {handle.index} did not start within {timeout} s", worker_index=handle.index
        )

    # ---- commands -----------------------------------------------------------------------------
    def send(self, call: Call) -> None:
        """Start the command on every worker; reset options and the object actions (each
        worker's rows) travel with it."""
        if self._unsettled:
            self._settle()
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

    def run_local(self, call: Call, timeout: float | None = None) -> int | None:
        """Run this process's share of the command (once, even if the wait is resumed; its
        error is raised by :meth:`wait`); returns the stop of its rows (0: none here). It
        cannot be cut short: past ``timeout`` it raises TimeoutError after it."""
        if call.extras is not None:
            return None  # ran already
        deadline = None if timeout is None else time.monotonic() + timeout
        local = self.local
        call.extras = {}
        if local is not None:
            try:
                if self.concurrency is None:
                    call.extras = local.wait(call)
                else:
                    with self.concurrency:
                        call.extras = local.wait(call)
            except Exception as exc:  # a sub-env of this process raised: raised once
                call.local_error = exc  # every worker has answered (in wait)
        if deadline is not None and time.monotonic() > deadline and self.handles:
            rows = list(range(*local.bounds[0])) if local is not None else []
            raise SubEnvTimeoutError(
                f"the {call.kind} did not finish within {timeout} s: sub-envs "
                f"{_rows(rows)} stepped in this process took longer (with a timeout= "
                "option, none is)",
                [(0, os.getpid(), rows)],
            )
        return local.bounds[-1][1] if local is not None else 0

    def wait(self, call: Call, timeout: float | None = None) -> dict[int, Extras]:
        """Collect every worker's answer (running this process's share first, where
        :meth:`run_local` has not). The share stepped in this process counts against
        ``timeout``, though it cannot be cut short: a wait that outlasts ``timeout`` raises
        TimeoutError after it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if call.extras is None:  # not run yet
            self.run_local(call, timeout)
        try:
            error = self._collect(deadline, into=call.extras)
        except TimeoutError:
            raise self.busy_error(call, timeout) from None
        if call.local_error is not None:  # the sub-env's own exception, as SerialEnv raises it
            raise call.local_error
        if error is not None:
            raise error
        return call.extras

    def drain(self, call: Call, timeout: float | None = None) -> None:
        """End a call whose wait was interrupted: read the worker processes' answers and drop
        them, and the errors of their sub-envs; this process's share does not run again. A
        dead worker raises WorkerError. After a TimeoutError, calling again resumes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            error = self._collect(deadline, on_reply=_drop)
        except TimeoutError:
            raise self.busy_error(call, timeout) from None
        if error is not None and error.worker_traceback is None:  # died, not raised
            raise error

    def busy_error(self, call: Call, timeout: float | None) -> SubEnvTimeoutError:
        """The error for a wait that outlasted ``timeout``: it names the workers that had
        not answered, and their sub-envs."""
        busy = [
            (h.index, h.process.pid, list(range(h.start, h.stop))) for h in self.handles if h.busy()
        ]
        what = f"{call.name} request" if call.kind == "request" else call.kind
        where = "; ".join(f"sub-envs {_rows(r)} (worker {w}, pid {pid})" for w, pid, r in busy)
        return SubEnvTimeoutError(
            f"the {what} did not finish within {timeout} s; still busy: {where}", busy
        )

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

    # ---- first-ready commands -------------------------------------------------------------------
    def send_some(self, rows: Sequence[int]) -> None:
        """Hand each row a ticket (the order sent) and wake the workers that hold them; this
        process's rows are queued for :meth:`wait_some`."""
        if self._objects:
            raise first_ready_objects_error("actions")
        self._sending = self._tickets  # the tickets of this call are above it (resend_some)
        self._hand_out(rows, resend=False)

    def resend_some(self, rows: Sequence[int]) -> None:
        """The rows of an interrupted :meth:`send_some`: a ticket for each row that got none
        (tickets above ``_sending`` are this call's), the local ones queued, and a RUN_SOME
        for every worker that holds some (one more wake-up changes nothing)."""
        self._hand_out(rows, resend=True)

    def _hand_out(self, rows: Sequence[int], resend: bool) -> None:
        words, handle_of_row = self.row_words, self.handle_of_row
        local, woken = [], {}
        for row in rows:
            handle = handle_of_row[row]
            if handle is None:
                local.append(row)
                continue
            if not resend or words[row, TICKET] <= self._sending:
                self._tickets += 1
                self._gathered[row] = 0
                words[row, TICKET] = self._tickets
            woken[handle.index] = handle
        if local:
            (self.local.resend_some if resend else self.local.send_some)(local)
        for handle in woken.values():  # after every ticket: one wake-up runs them all
            handle.post(Command.RUN_SOME)
            self._unsettled.add(handle)

    def wait_some(
        self,
        rows: Sequence[int],
        min_get: int,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> dict[int, Any]:
        """Gather the rows the workers finished; run this process's queued rows one at a
        time while too few are; otherwise block on the ``ready`` semaphore (checking that
        the workers holding rows in flight are alive)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        finished, local, gathered = self._finished, self.local, self._gathered
        wanted = set(rows)
        done = [row for row in finished if row in wanted]  # finished before this wait
        waiting = [row for row in rows if row >= self.local_stop and not gathered[row]]
        if waiting:
            done += self._gather(waiting)
        self._raise_failed(done)
        while len(done) < min_get:
            if local is not None and local.queue:
                if self.concurrency is None:
                    row = local.run_next()
                else:
                    with self.concurrency:
                        row = local.run_next()
                finished[row] = local.finished.pop(row)
                if row in wanted:
                    done.append(row)
                    self._raise_failed([row])
                continue
            waiting = [row for row in waiting if not gathered[row]]
            if not waiting:  # the engine's books say otherwise: never wait for nothing
                raise RuntimeError(f"first-ready wait: none of sub-envs {list(rows)} is running")
            new: list[int] = []
            while not new:  # a wake-up can come from a row gathered already
                self._block(waiting, deadline, min_get)
                new = self._gather(waiting)
            done += new
            self._raise_failed(new)
        return take_finished(finished, rows, max_get)

    def _raise_failed(self, rows: list[int]) -> None:
        """The error of the first of ``rows`` (finished) that failed: that row is over, the
        others stay for a later wait."""
        finished = self._finished
        failed = next((row for row in rows if isinstance(finished[row], WorkerError)), None)
        if failed is not None:
            self._lost.append(failed)
            raise finished.pop(failed)

    def _gather(self, rows: list[int]) -> list[int]:
        """The rows of ``rows`` that their workers finished since the last look, in the order
        sent; each goes into ``_finished`` with its extras (or its error)."""
        ints, gathered = self.row_ints, self._gathered
        new = [
            row
            for row in rows
            if not gathered[row]
            and ints[row * ROW_WORDS + FINISHED] >= ints[row * ROW_WORDS + TICKET]
        ]
        if len(new) > 1:
            new.sort(key=lambda row: ints[row * ROW_WORDS + TICKET])
        finished = self._finished
        for row in new:
            gathered[row] = 1
            handle = self.handle_of_row[row]
            base = row * ROW_WORDS
            payload = self._message(handle, row) if ints[base + ROW_REPLY] else None
            if ints[base + ROW_STATUS] == _ERROR:
                message = f"sub-env {row} in worker {handle.index} raised"
                finished[row] = handle.raised(message, payload)
            else:
                finished[row] = payload
        return new

    def _message(self, handle: WorkerHandle, row: int) -> Any:
        """What ``handle``'s worker sent for ``row``: messages of its other rows read on the
        way are kept for their turn."""
        messages = self._messages
        while row not in messages:
            try:
                sender, payload = handle.conn.recv()
            except (EOFError, OSError):
                self._lose_worker(handle)
                raise handle.died() from None
            except BaseException:
                # Interrupted mid-read (Ctrl-C): the rest of that message cannot be told from
                # the next one, so the pipe is of no more use. The worker goes, and its rows
                # with it: its next command raises WorkerError instead of reading garbage.
                self._lost.append(row)
                terminate(handle.process)
                self._lose_worker(handle)
                raise
            messages[sender] = payload
        return messages.pop(row)

    def _block(self, rows: list[int], deadline: float | None, min_get: int) -> None:
        """Wait for some worker to finish a row (a post of ``ready``): spin briefly where
        spinning pays (see ``ProcessOptions.spin_seconds``), then block. Returns after a post
        or a liveness poll, for the caller to gather; raises past ``deadline``
        (TimeoutError) or when a worker holding one of ``rows`` is dead (WorkerError)."""
        ready, spin = self.ready, self.parent_spin
        spin_s = spin.budget()
        if spin_s > 0:
            end = time.perf_counter() + spin_s
            while time.perf_counter() < end:
                if ready.acquire(False):
                    spin.record(True)
                    return
            spin.record(False)
        poll = LIVENESS_POLL_S
        if deadline is not None:
            poll = min(poll, max(deadline - time.monotonic(), 0.0))
        if ready.acquire(True, poll):
            return
        busy = [row for row in rows if not self._gathered[row]]
        for handle in dict.fromkeys(self.handle_of_row[row] for row in busy):
            if not handle.process.is_alive():
                self._gather(rows)  # what it finished before it died still counts
                self._lose_worker(handle)
                raise handle.died()
        if deadline is not None and time.monotonic() >= deadline:
            self._gather(rows)  # one last look: a row may have finished just now
            busy = [row for row in rows if not self._gathered[row]]
            handles = dict.fromkeys(self.handle_of_row[row] for row in busy)
            workers = sorted(handle.index for handle in handles)
            raise SubEnvTimeoutError(
                f"first-ready wait: fewer than {min_get} sub-envs finished in time; "
                f"sub-envs {busy} (workers {workers}) are still running",
                [
                    (h.index, h.process.pid, [row for row in busy if self.handle_of_row[row] is h])
                    for h in handles
                ],
            )

    def _lose_worker(self, handle: WorkerHandle) -> None:
        """``handle``'s worker is gone: its rows in flight are lost."""
        words = self.row_words[handle.start : handle.stop]
        for k in np.flatnonzero(words[:, TICKET] > words[:, FINISHED]).tolist():
            words[k, FINISHED] = words[k, TICKET]  # nothing will finish it now
            self._gathered[handle.start + k] = 1  # nor gather it
            self._lost.append(handle.start + k)
        handle.answered = handle.seq
        self._unsettled.discard(handle)

    def take_lost(self) -> list[int]:
        lost, self._lost = self._lost, []
        if self.local is not None:
            lost += self.local.take_lost()
        return lost

    def add_info_fields_in_flight(self, places: dict) -> bool:
        """This process's groups adopt ``places`` now; each worker finds them on its pipe
        (the ``FIELDS`` word counts the messages) before it runs its next row, or once woken
        by a RUN_SOME that has no row for it."""
        if self.local is not None:
            self.local.add_info_fields_in_flight(places)
        payload = cloudpickle.dumps(places)
        for handle in self.handles:
            if not handle.process.is_alive():
                continue  # its rows are lost already, or will be at the next wait
            try:
                handle.conn.send_bytes(payload)  # before the word: read once the worker sees it
            except OSError:  # it died just now: the next wait finds out
                continue
            handle.words[FIELDS] += 1
            handle.post(Command.RUN_SOME)
            self._unsettled.add(handle)
        return True

    def _settle(self) -> None:
        """Before a whole-batch command or a request: wait until each worker sent first-ready
        rows has found none left (it then reads the next command word, not a stale one), and
        drop the wake-ups posted meanwhile."""
        for handle in self._unsettled:
            if handle.process.is_alive():
                handle.wait(self.parent_spin, None)
            while handle.done.acquire(False):
                pass
        self._unsettled.clear()
        while self.ready.acquire(False):
            pass

    # ---- requests -----------------------------------------------------------------------------

    def request_send(self, call: Call) -> None:
        """Post the request to the workers that hold some of ``call.indices``. Every worker's
        request is pickled before any is posted: a failure leaves no worker a step ahead."""
        if self._unsettled:
            self._settle()
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
        if local is not None and not call.local_done:  # while the workers run theirs
            call.local_done = True
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

        try:
            died = self._collect(deadline, on_reply, [handle for handle, _ in asked])
        except TimeoutError:
            raise self.busy_error(call, timeout) from None
        error = next((e for e in errors if e is not None), died)
        if error is not None:
            raise error
        return call.results

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker: an idle one closes its sub-envs and exits (``timeout`` s at
        most); one still busy with a command (it timed out, or the wait was given up) could
        not read the close before that command ends, if ever: it is terminated at once."""
        busy = [handle.busy() for handle in self.handles]
        for handle, is_busy in zip(self.handles, busy):
            if is_busy:
                terminate(handle.process)
            elif handle.process.is_alive():
                try:
                    handle.post(Command.CLOSE)
                except (OSError, ValueError):
                    pass
        for handle, is_busy in zip(self.handles, busy):
            stop_process(handle.process, 0.0 if is_busy else timeout)
            handle.release()
        self.handles = []
        self._unsettled.clear()
        unlink_semaphore(self.concurrency)
        unlink_semaphore(self.ready)
        self.sync_memory = self.concurrency = self.rows_memory = self.ready = None
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


def terminate(process) -> None:
    if process._popen is not None and process.exitcode is None:
        process.terminate()


def stop_process(process, timeout: float) -> None:
    """Join, then terminate, then kill: never wait unbounded."""
    if process._popen is None:  # never started
        return
    if timeout > 0:
        process.join(timeout)
    if process.exitcode is None:
        process.terminate()
        process.join(1.0)
    if process.exitcode is None:
        process.kill()
        process.join()


def _rows(rows: list[int]) -> str:
    """Sub-env indices, a run of them as ``a-b``."""
    if len(rows) > 2 and rows == list(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}-{rows[-1]}"
    return ", ".join(map(str, rows))


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


def refuse_start_while_importing_main() -> None:
    """In a spawned worker that is still importing the main module (a script that builds
    an env at import time, without ``if __name__ == "__main__":``), exit at once with
    ``MAIN_REIMPORT_EXIT``: the parent tells its user why (``ProcessExecutor._wait_ready``),
    instead of one multiprocessing traceback per worker."""
    if getattr(mp.current_process(), "_inheriting", False):
        sys.stderr.flush()
        os._exit(MAIN_REIMPORT_EXIT)


def start_failure(handle: WorkerHandle) -> WorkerError:
    """The error for a worker that died before it was ready: a MainModuleError when it
    found itself importing the main module (see refuse_start_while_importing_main)."""
    handle.process.join(1.0)
    if handle.process.exitcode == MAIN_REIMPORT_EXIT:
        return main_reimport_error(handle)
    return handle.died()


def main_reimport_error(handle: WorkerHandle) -> MainModuleError:
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or "the main module"
    return MainModuleError(
        f"worker {handle.index} could not start: {script} builds this env when it is "
        "imported, and spawned worker processes import it again. Put the code that builds "
        'and runs the env under `if __name__ == "__main__":` (or in a function called from '
        "there).",
        worker_index=handle.index,
    )


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
