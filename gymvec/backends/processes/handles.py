"""The parent's end of the worker processes: one :class:`WorkerHandle` each, how they start
(:func:`wait_ready`: their first message) and how they stop.

Guarantees kept here (docs/troubleshooting.md gives the figures):

* an interrupt (Ctrl-C) that cuts a message to or from a worker short poisons nothing: the
  pipe cannot be resynchronised, so that worker is stopped at once and every later command
  raises a ``WorkerError`` that says so, instead of reading the rest of the message as the
  next one;
* :func:`stop_workers` ends every worker within ``CLOSE_GRACE_S + TERM_GRACE_S + KILL_WAIT_S``
  in total, however many there are: all are asked (or terminated) at once, then waited for
  against one deadline.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Semaphore
from typing import Any

import cloudpickle

from gymvec.backends.processes.signals import (
    BUILDING,
    CMD,
    CMD_SEQ,
    DONE_SEQ,
    GIVE_UP,
    REPLY,
    STATUS,
    Opcode,
    PeerDied,
    Spin,
    Status,
    wait_for,
)
from gymvec.errors import (
    ClosedEnvError,
    ErrorDetail,
    MainModuleError,
    SpaceMismatchError,
    SubEnvTimeoutError,
    WorkerError,
    rows_text,
    sub_env_error,
)
from gymvec.subenvs.group import SubEnvSummary
from gymvec.wire.calls import Call, Request

_ERROR = int(Status.ERROR)
# close(): how long the workers have to close their sub-envs once asked, then how long they
# have to exit after SIGTERM, then how long SIGKILL is waited for (all workers together).
CLOSE_GRACE_S = 5.0
TERM_GRACE_S = 1.0
KILL_WAIT_S = 1.0
# The exit code of a spawned worker that found itself importing the main module (see
# refuse_start_while_importing_main); EX_CONFIG of sysexits.h.
MAIN_REIMPORT_EXIT = 78


class WorkerHandle:
    """The parent's end of one worker process."""

    def __init__(
        self,
        index: int,
        start: int,
        stop: int,
        process: BaseProcess,
        conn: Connection,
        wake: Semaphore,
        done: Semaphore,
        words: memoryview,
    ) -> None:
        self.index, self.start, self.stop = index, start, stop
        self.process, self.conn = process, conn
        self.wake, self.done = wake, done
        self.words = words
        self.seq = 0
        self.answered = 0  # the last command whose answer was read
        self.summaries: list[SubEnvSummary] = []  # of its sub-envs, once built or ready
        self.built = False  # it built its sub-envs and waits for its rows (two phases)
        self.ready = False  # it built its sub-envs and reads commands
        self.failure: str | None = None  # why it is known gone (every later command raises)
        self.death: str | None = None  # how it died, once seen dead ("signal 11", "exit code 3")

    def post(self, command: Opcode, payload: Any = None) -> None:
        self.seq += 1
        self.words[CMD] = command  # (an IntEnum: an int, as a memoryview item must be)
        self.words[CMD_SEQ] = self.seq
        self.wake.release()
        if payload is not None:  # after the wake-up: the worker reads while we write
            self.send(payload)

    def send(self, payload: bytes) -> None:
        """Write one message to the worker; cut short, the worker is stopped (see cut)."""
        try:
            self.conn.send_bytes(payload)
        except OSError:  # its end of the pipe is gone: so is the worker
            raise self.died() from None
        except BaseException:
            self.cut("a message to it")
            raise

    def wait(self, spin: Spin, timeout: float | None) -> Any:
        """Wait for the answer to the last command; returns the reply (None if none)."""
        if self.words[DONE_SEQ] >= self.seq:  # done already (a step's usual case, after the
            self.done.acquire(False)  # local share): wait_for's own first test, without its call
        else:
            try:
                wait_for(self.words, DONE_SEQ, self.seq, self.done, spin, self.alive, timeout)
            except PeerDied:
                raise self.died() from None
        reply: Any = None  # (an ErrorDetail where the worker raised)
        try:
            # Answered from here on: an interrupt below either cuts the reply (the worker is
            # stopped) or comes after it was read whole; never is a reply read twice.
            self.answered = self.seq
            if self.words[REPLY]:
                reply = self.conn.recv()
        except (EOFError, OSError):
            raise self.died() from None
        except BaseException:
            self.cut("its reply")
            raise
        if self.words[STATUS] == _ERROR:
            raise self.raised(reply)
        return reply

    def cut(self, what: str) -> None:
        """An interrupt cut ``what`` short mid-message: the rest of it cannot be told from the
        next message, so the pipe is of no more use. The worker is stopped now; every later
        command raises WorkerError (see ``check``)."""
        self.failure = (
            f"worker {self.index} (pid {self.process.pid}) was stopped: an interrupt cut "
            f"{what} short, so its pipe could not be read on; close this env and make a new one"
        )
        self.answered = self.seq
        terminate(self.process)

    def check(self) -> None:
        """Raise the WorkerError of a worker known gone, before any command is posted: the
        other workers' sub-envs then stay as they were, instead of stepping for nothing."""
        if self.failure is not None:
            raise WorkerError(self.failure, worker_index=self.index)

    def raised(self, detail: ErrorDetail, what: str = "") -> WorkerError:
        """The error for what the worker sent when it raised (see ``errors.sub_env_error``)."""
        where = f"worker {self.index}, pid {self.process.pid}"
        return sub_env_error(detail, worker_index=self.index, where=where, what=what)

    def alive(self) -> bool:
        return self.process.is_alive()

    def busy(self) -> bool:
        """Whether the worker has not finished the last command posted to it."""
        return self.answered != self.seq and self.words[DONE_SEQ] < self.seq

    def building(self) -> int | None:
        """The sub-env whose factory runs in the worker now (start-up), if any."""
        row = self.words[BUILDING]
        return row - 1 if row else None

    def died(self) -> WorkerError:
        self.process.join(0.1)
        code = self.process.exitcode
        how = f"exit code {code}"
        self.death = how
        if code is not None and code < 0:
            how = f"signal {signal.Signals(-code).name}"
            self.death = f"signal {-code}"
        message = f"worker {self.index} (pid {self.process.pid}) died ({how})"
        self.failure = self.failure or message
        return WorkerError(message, worker_index=self.index)

    def release(self) -> None:
        """Close the parent's end: the pipe, the process object and the semaphores, whose
        /dev/shm entries go now (see ``unlink_semaphore``)."""
        self.conn.close()
        if self.process.exitcode is not None:  # (one that outlived SIGKILL is left as is)
            self.process.close()
        unlink_semaphore(self.wake)
        unlink_semaphore(self.done)
        del self.process, self.wake, self.done  # dropped: nothing of them is to be used again


def raise_if_closing(closing: bool) -> None:
    """The closing guard of a call that waits on the workers, called in its ``except`` block
    (then ``raise``): where ``close()`` began meanwhile (``closing``, from another thread), the
    call raises ClosedEnvError instead of what the closing caused (a worker gone, say). A
    plain call, not a context manager: the step path pays nothing for it until a call fails."""
    if closing:
        raise ClosedEnvError(
            "the env was closed (from another thread) while this call waited: create a new "
            "one to go on"
        ) from None


def stop_workers(handles: list[WorkerHandle], grace_s: float = CLOSE_GRACE_S) -> Exception | None:
    """Stop every worker, all at once: each idle one is asked to close its sub-envs and exit,
    and has ``grace_s`` for it (one deadline for all); one that is busy, not started, known
    gone or past the deadline gets SIGTERM, then ``TERM_GRACE_S`` later SIGKILL, waited for
    ``KILL_WAIT_S``. Returns the first error a sub-env's ``close()`` raised in a worker."""
    asked = []
    for handle in handles:
        if handle.ready and handle.failure is None and not handle.busy() and handle.alive():
            try:
                handle.post(Opcode.CLOSE)
                asked.append(handle)
                continue
            except (OSError, ValueError, WorkerError):
                pass
        elif handle.built and handle.alive():  # it waits for its rows: it closes and exits
            try:
                handle.send(GIVE_UP)
                continue
            except (OSError, ValueError, WorkerError):
                pass
        terminate(handle.process)
    deadline = time.monotonic() + grace_s
    error = None
    no_spin = Spin(0.0)
    for handle in asked:  # their answers: a sub-env's close error comes back as any error
        try:
            handle.wait(no_spin, max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            pass
        except WorkerError as exc:
            if exc.worker_traceback is not None:  # raised, not died
                error = error or exc
    processes = [handle.process for handle in handles if _started(handle.process)]
    left = join_all(processes, deadline)
    for process in left:
        terminate(process)
    left = join_all(left, time.monotonic() + TERM_GRACE_S)
    for process in left:
        process.kill()
    join_all(left, time.monotonic() + KILL_WAIT_S)
    return error


def join_all(processes: list, deadline: float) -> list:
    """Wait until every process of ``processes`` has exited, or ``deadline``; returns those
    still running (each sentinel read at most until then: a stopped forkserver, which owes
    the exit codes of its children, cannot make this wait longer)."""
    left = list(processes)
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        mp.connection.wait([process.sentinel for process in left], remaining)
        left = [process for process in left if process.exitcode is None]
    return [process for process in left if process.exitcode is None]


def _started(process: BaseProcess) -> bool:
    """Whether ``process.start()`` ran (one whose start failed has nothing to wait for)."""
    return process._popen is not None  # type: ignore[attr-defined]  # (private: typeshed lacks it)


def terminate(process: BaseProcess) -> None:
    if _started(process) and process.exitcode is None:
        process.terminate()


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


def refuse_start_while_importing_main() -> None:
    """In a spawned worker that is still importing the main module (a script that builds
    an env at import time, without ``if __name__ == "__main__":``), exit at once with
    ``MAIN_REIMPORT_EXIT``: the parent tells its user why (``start_failure``), instead of one
    multiprocessing traceback per worker."""
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


def wait_ready(
    handles: list[WorkerHandle],
    deadline: float,
    startup_timeout: float,
    factory_timeout: float | None,
) -> None:
    """Wait for every worker's first message: all against one deadline (``startup_timeout``
    after the start), and each one's factories against ``factory_timeout`` from the moment
    the first of them begins (launching the interpreter and its imports does not count
    there)."""
    pending = list(handles)
    began: dict[WorkerHandle, float] = {}  # when each worker's first factory began
    while pending:
        now = time.monotonic()
        if now >= deadline:
            raise startup_timeout_error(pending, startup_timeout)
        left = deadline - now
        if factory_timeout is not None:
            for handle in pending:
                if handle not in began and handle.building() is not None:
                    began[handle] = now
            late = [h for h in began if h in pending and now - began[h] >= factory_timeout]
            if late:
                raise startup_timeout_error(late, factory_timeout)
            left = min(left, 0.05)  # (to see factories begin)
        waits = [h.conn for h in pending] + [h.process.sentinel for h in pending]
        ready = mp.connection.wait(waits, left)
        for handle in [h for h in pending if h.conn in ready or h.process.sentinel in ready]:
            if handle.conn not in ready:
                raise start_failure(handle)
            _read_ready(handle)
            pending.remove(handle)


def _read_ready(handle: WorkerHandle) -> None:
    try:
        kind, detail = cloudpickle.loads(handle.conn.recv_bytes())
    except (EOFError, OSError):  # it died before its first message
        raise start_failure(handle) from None
    if kind == "mismatch":
        message, what = detail
        raise SpaceMismatchError(f"worker {handle.index}: {message}", kind=what)
    if kind == "error":
        raise handle.raised(detail, what="create_env_fn")
    handle.summaries = detail
    if kind == "built":
        handle.built = True
    else:
        handle.ready, handle.built = True, False


def startup_timeout_error(pending: list[WorkerHandle], timeout: float) -> SubEnvTimeoutError:
    """The error for workers not ready in time: it names the sub-env whose factory each one
    still runs."""
    parts = []
    for handle in pending:
        row = handle.building()
        what = f"sub-env {row}'s factory is still running" if row is not None else "starting"
        parts.append(f"{what} (worker {handle.index}, pid {handle.process.pid})")
    return SubEnvTimeoutError(
        f"start-up did not finish within {timeout} s: " + "; ".join(parts),
        [(h.index, h.process.pid, list(range(h.start, h.stop))) for h in pending],
    )


def local_timeout(call: Call, local: Any, timeout: float | None) -> SubEnvTimeoutError:
    """The error for a share run in this process that outlasted ``timeout``."""
    rows = list(range(*local.bounds[0]))
    return SubEnvTimeoutError(
        f"the {call.kind} did not finish within {timeout} s: sub-envs {rows_text(rows)} stepped "
        "in this process took longer (with a timeout= option, none is)",
        [(0, os.getpid(), rows)],
    )


def busy_error(
    handles: list[WorkerHandle], call: Call, timeout: float | None
) -> SubEnvTimeoutError:
    """The error for a wait that outlasted ``timeout``: it names the workers that had not
    answered, and their sub-envs."""
    busy = [(h.index, h.process.pid, list(range(h.start, h.stop))) for h in handles if h.busy()]
    what = f"{call.name} request" if isinstance(call, Request) else call.kind
    where = "; ".join(f"sub-envs {rows_text(r)} (worker {w}, pid {pid})" for w, pid, r in busy)
    return SubEnvTimeoutError(
        f"the {what} did not finish within {timeout} s; still busy: {where}", busy
    )
