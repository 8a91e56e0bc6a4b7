"""First-ready commands over worker processes: single sub-envs ("rows") sent and gathered
one at a time (see ``signals.py`` for the row words and ``Executor`` for the contract).

:class:`ProcessRows` is the part of ``ProcessExecutor`` that hands rows tickets, wakes their
workers, gathers the rows they finished and reads the messages that come with them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

from gymvec.backends.executor import first_ready_objects_error, take_finished
from gymvec.backends.local import LocalExecutor
from gymvec.backends.processes.handles import WorkerHandle
from gymvec.backends.processes.signals import (
    FIELDS,
    FINISHED,
    LIVENESS_POLL_S,
    ROW_REPLY,
    ROW_STATUS,
    ROW_WORDS,
    TICKET,
    Opcode,
    Spin,
    Status,
)
from gymvec.errors import SubEnvTimeoutError, WorkerError, expect_set
from gymvec.wire.calls import Take

if TYPE_CHECKING:
    from gymvec.backends.processes.respawn import Respawner

_ERROR = int(Status.ERROR)


class ProcessRows:
    """The first-ready rows of a batch whose workers are ``handles`` (and ``local``'s share,
    rows ``[0, local_stop)``, run in this process).

    Args:
        handles: the worker processes.
        local: the executor of this process's share, if any.
        rows_memory: the row words of every sub-env.
        ready: the semaphore a worker posts when it finished a row.
        concurrency: the semaphore of ``max_concurrency`` (None: no limit).
        spin: how the parent spins before it blocks.
        objects: whether the sub-envs take object actions (which these commands cannot send).
        units: per row, the rows that run with it (a block's), or None where every sub-env
            is one row.
    """

    def __init__(
        self,
        handles: list[WorkerHandle],
        local: LocalExecutor | None,
        rows_memory: Any,
        ready: Any,
        concurrency: Any,
        spin: Spin,
        objects: bool,
        units: list[range] | None = None,
    ):
        self.handles, self.local = handles, local
        self.units = units
        self.ready, self.concurrency, self.parent_spin = ready, concurrency, spin
        self._objects = objects
        num_envs = len(rows_memory) // (ROW_WORDS * 8)
        self.local_stop = local.bounds[-1][1] if local is not None else 0
        self.row_words = np.frombuffer(rows_memory, dtype=np.int64).reshape(num_envs, ROW_WORDS)
        # the same words as Python ints: a first-ready wait reads a few per row it checks
        self.row_ints = memoryview(rows_memory).cast("B").cast("q")
        self.handle_of_row: list[WorkerHandle | None] = [None] * num_envs
        for handle in handles:
            self.handle_of_row[handle.start : handle.stop] = [handle] * (handle.stop - handle.start)
        self._tickets = 0
        self._sending = 0  # the ticket count when the last send_some began
        self._finished: dict[int, Any] = {}  # row -> its Extras, None, or its WorkerError
        # per row: its last ticket was gathered (bytes, whose items index faster than numpy's)
        self._gathered = bytearray(num_envs)
        self._messages: dict[int, Any] = {}  # row -> what its worker sent, read early
        self._lost: list[int] = []
        self.unsettled: set[WorkerHandle] = set()  # posted RUN_SOME, not yet seen idle
        # deaths heal (``ProcessExecutor.heal_deaths``): a dead worker starts again here too
        self.respawner: Respawner | None = None
        # rows of a worker started again while they were not in flight: their next command
        # is not sent, it comes back as this fault (their sub-envs are new)
        self.owed: dict[int, Any] = {}
        self.hung: list[WorkerHandle] = []  # the workers the last wait timed out on
        # A row's time starts when it was sent or when its worker last finished a row,
        # whichever came later: a worker runs its rows one at a time, so those queued behind
        # a slow one are not hung.
        self._sent_at = [0.0] * num_envs  # per row: when its last ticket was handed out
        self._progress = {handle.index: 0.0 for handle in handles}  # per worker
        self._next_look = 0.0  # when a wait next looks for dead or hung workers

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
        owed, sent_at, now = self.owed, self._sent_at, time.monotonic()
        for row in rows:
            handle = handle_of_row[row]
            if owed and row in owed:
                self._finished[row] = owed.pop(row)
                self._gathered[row] = 1
                continue
            if handle is None:
                local.append(row)
                continue
            if not resend or words[row, TICKET] <= self._sending:
                self._tickets += 1
                self._gathered[row] = 0
                words[row, TICKET] = self._tickets
                sent_at[row] = now
            woken[handle.index] = handle
        if local:
            # (the rows no worker holds are this process's)
            executor = expect_set(self.local, "the local share of first-ready rows")
            (executor.resend_some if resend else executor.send_some)(local)
        for handle in woken.values():  # after every ticket: one wake-up runs them all
            handle.post(Opcode.RUN_SOME)
            self.unsettled.add(handle)

    def wait_some(self, take: Take) -> dict[int, Any]:
        """Gather the rows the workers finished; run this process's queued rows one at a
        time while too few are; otherwise block on the ``ready`` semaphore (checking that
        the workers holding rows in flight are alive, and none past ``take.row_limit``)."""
        rows, min_get, max_get, timeout, row_limit = take
        self.hung = []
        deadline = None if timeout is None else time.monotonic() + timeout
        finished, local, gathered = self._finished, self.local, self._gathered
        wanted = set(rows)
        done = [row for row in finished if row in wanted]  # finished before this wait
        waiting = [row for row in rows if row >= self.local_stop and not gathered[row]]
        if waiting:
            done += self._gather(waiting)
            # A dead worker's rows (where deaths heal) and a hung one's come back although
            # others keep finishing (a look every LIVENESS_POLL_S).
            if time.monotonic() >= self._next_look:
                self._next_look = time.monotonic() + LIVENESS_POLL_S
                if self.respawner is not None:
                    done += self._dead_rows(waiting)
                if row_limit is not None:
                    done += self._late_rows(waiting, row_limit)
        self._raise_failed(done)
        while len(done) < min_get:
            if local is not None and local.queue:
                if self.concurrency is None:
                    ran = local.run_next()
                else:
                    with self.concurrency:
                        ran = local.run_next()
                for row in ran:
                    finished[row] = local.finished.pop(row)
                ran = [row for row in ran if row in wanted]
                done += ran
                self._raise_failed(ran)
                continue
            waiting = [row for row in waiting if not gathered[row]]
            if not waiting:  # the engine's books say otherwise: never wait for nothing
                raise RuntimeError(f"first-ready wait: none of sub-envs {list(rows)} is running")
            new: list[int] = []
            while not new:  # a wake-up can come from a row gathered already
                new = self._block(waiting, deadline, min_get, row_limit)  # (healed faults)
                new += self._gather(waiting)
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

        def over(row: int) -> bool:
            return ints[row * ROW_WORDS + FINISHED] >= ints[row * ROW_WORDS + TICKET]

        new = [row for row in rows if not gathered[row] and over(row)]
        units = self.units
        if units is not None:  # a block's rows count once all of them are published
            new = [row for row in new if all(over(r) for r in units[row])]
            if len(new) > 1:  # together, in the order their units were sent
                new.sort(key=lambda row: (ints[units[row][0] * ROW_WORDS + TICKET], row))
        elif len(new) > 1:
            new.sort(key=lambda row: ints[row * ROW_WORDS + TICKET])
        finished, progress = self._finished, self._progress
        now = time.monotonic() if new else 0.0
        for row in new:
            gathered[row] = 1
            handle = self._worker_of(row)
            progress[handle.index] = now
            base = row * ROW_WORDS
            payload: Any = self._message(handle, row) if ints[base + ROW_REPLY] else None
            if ints[base + ROW_STATUS] == _ERROR:
                finished[row] = handle.raised(payload)
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
                messages[sender] = payload
            except (EOFError, OSError):
                self._lose_worker(handle)
                raise handle.died() from None
            except BaseException:
                # Interrupted mid-read (Ctrl-C): the worker is stopped (see WorkerHandle.cut),
                # and its rows go with it.
                self._lost.append(row)
                handle.cut("its reply")
                self._lose_worker(handle)
                raise
        return messages.pop(row)

    def _block(
        self, rows: list[int], deadline: float | None, min_get: int, row_limit: float | None
    ) -> list[int]:
        """Wait for some worker to finish a row (a post of ``ready``): spin briefly where
        spinning pays (see ``ProcessOptions.spin_seconds``), then block. Returns after a post
        or a liveness poll, for the caller to gather; raises past ``deadline``
        (TimeoutError) or when a worker holding one of ``rows`` is dead (WorkerError) or past
        ``row_limit`` (TimeoutError), unless deaths heal: the rows it had in flight are then
        returned, finished as faults."""
        ready, spin = self.ready, self.parent_spin
        spin_s = spin.budget()
        if spin_s > 0:
            end = time.perf_counter() + spin_s
            while time.perf_counter() < end:
                if ready.acquire(False):
                    spin.record(True)
                    return []
            spin.record(False)
        poll = LIVENESS_POLL_S
        if deadline is not None:
            poll = min(poll, max(deadline - time.monotonic(), 0.0))
        if ready.acquire(True, poll):
            return []
        healed = self._dead_rows(rows)
        if not healed and row_limit is not None:
            healed = self._late_rows(rows, row_limit)
        if healed:
            return healed
        if deadline is not None and time.monotonic() >= deadline:
            self._gather(rows)  # one last look: a row may have finished just now
            busy = [row for row in rows if not self._gathered[row]]
            raise self._timeout_error(busy, f"fewer than {min_get} sub-envs finished in time")
        return []

    def _late_rows(self, rows: list[int], limit: float) -> list[int]:
        """Where a row of ``rows`` has run past ``limit`` seconds (the engine's timeout) while
        others finish, its worker is hung: where hangs heal it is killed and started again,
        its rows in flight finished as faults of kind "timeout" (returned, with the rows
        found finished on the way); otherwise a SubEnvTimeoutError names it."""
        sent_at, gathered, progress = self._sent_at, self._gathered, self._progress
        worker_of = self._worker_of

        def late() -> list[int]:
            since = time.monotonic() - limit
            return [
                row
                for row in rows
                if not gathered[row] and max(sent_at[row], progress[worker_of(row).index]) < since
            ]

        if not late():
            return []
        found = self._gather(rows)  # one last look: a row may have finished just now
        hung = late()
        if hung and self.respawner is None:
            raise self._timeout_error(hung, f"a sub-env ran past the timeout of {limit} s")
        for handle in dict.fromkeys(worker_of(row) for row in hung):
            found += self._start_again(handle, "timeout", f"timed out after {limit} s")
        return found

    def _timeout_error(self, busy: list[int], what: str) -> SubEnvTimeoutError:
        """A first-ready wait's TimeoutError: ``busy`` (rows) still running; their workers
        are the ones it hung on (see :meth:`end_hung`)."""
        handles = dict.fromkeys(self._worker_of(row) for row in busy)
        self.hung = list(handles)
        workers = sorted(handle.index for handle in handles)
        return SubEnvTimeoutError(
            f"first-ready wait: {what}; sub-envs {busy} (workers {workers}) are still running",
            [
                (h.index, h.process.pid, [row for row in busy if self.handle_of_row[row] is h])
                for h in handles
            ],
        )

    def _dead_rows(self, rows: list[int]) -> list[int]:
        """Where a worker holding one of ``rows`` not gathered is dead: its WorkerError, or
        where deaths heal, its rows in flight finished as faults (see :meth:`_start_again`),
        returned with the rows found finished on the way."""
        busy = [row for row in rows if not self._gathered[row]]
        for handle in dict.fromkeys(self._worker_of(row) for row in busy):
            if not handle.process.is_alive():
                found = self._gather(rows)  # what it finished before it died still counts
                error = handle.died()
                if self.respawner is None:
                    self._lose_worker(handle)
                    raise error
                return found + self._start_again(handle, "death", f"worker died: {handle.death}")
        return []

    def _start_again(self, handle: WorkerHandle, kind: str, message: str) -> list[int]:
        """``handle``'s worker died or hung (killed here): start it again in its slot (see
        ``Respawner``). Its rows in flight finish now as faults of ``kind``, and are
        returned; its rows finished but not taken yet, and those out of flight, owe theirs
        to their next command (their sub-envs are new)."""
        respawner = expect_set(self.respawner, "a respawner")
        if handle.process.exitcode is None:
            handle.process.kill()
        mark = len(self._lost)
        self._lose_worker(handle)
        in_flight = self._lost[mark:]
        del self._lost[mark:]
        faults = respawner.respawn(handle, kind, message)
        finished = self._finished
        for row in in_flight:
            finished[row] = faults.pop(row)
        self.owed.update(faults)
        return in_flight

    def end_hung(self, timeout: float) -> bool:
        """The last wait outlasted the engine's ``timeout``: kill the workers it found busy
        and start them again; their rows in flight finish as faults of kind "timeout", for
        the wait that resumes. False where that wait found none (the timeout stands)."""
        hung, self.hung = self.hung, []
        for handle in hung:
            self._start_again(handle, "timeout", f"timed out after {timeout} s")
        return bool(hung)

    def _worker_of(self, row: int) -> WorkerHandle:
        """The worker that holds ``row`` (one past this process's share)."""
        return expect_set(self.handle_of_row[row], f"the worker of row {row}")

    def _lose_worker(self, handle: WorkerHandle) -> None:
        """``handle``'s worker is gone: its rows in flight are lost."""
        words = self.row_words[handle.start : handle.stop]
        for k in np.flatnonzero(words[:, TICKET] > words[:, FINISHED]).tolist():
            words[k, FINISHED] = words[k, TICKET]  # nothing will finish it now
            self._gathered[handle.start + k] = 1  # nor gather it
            self._lost.append(handle.start + k)
        handle.answered = handle.seq
        self.unsettled.discard(handle)

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
                handle.send(payload)  # before the word: read once the worker sees it
            except WorkerError:  # it died just now: the next wait finds out
                continue
            handle.words[FIELDS] += 1
            handle.post(Opcode.RUN_SOME)
            self.unsettled.add(handle)
        return True

    def settle(self) -> None:
        """Before a whole-batch command or a request: wait until each worker sent first-ready
        rows has found none left (it then reads the next command word, not a stale one), and
        drop the wake-ups posted meanwhile."""
        for handle in self.unsettled:
            if handle.process.is_alive():
                handle.wait(self.parent_spin, None)
            while handle.done.acquire(False):
                pass
        self.unsettled.clear()
        self.hung = []
        while self.ready.acquire(False):
            pass
