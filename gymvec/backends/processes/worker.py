"""The worker process of ``ParallelEnv``: it builds its sub-envs, then serves the parent's
commands (:class:`Worker`) until it is closed or the parent is gone (:class:`ParentWatch`).
How the two sides signal each other is ``signals.py``.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing as mp
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import cloudpickle

from gymvec.backends.processes.signals import (
    BUILDING,
    CMD,
    CMD_SEQ,
    DONE_SEQ,
    FIELDS,
    FINISHED,
    PARENT_ENDS,
    REPLY,
    ROW_REPLY,
    ROW_STATUS,
    ROW_WORDS,
    STATUS,
    TICKET,
    Opcode,
    PeerDied,
    Spin,
    Status,
    WorkerArgs,
    add_missing_env_specs,
    ready_message,
    sync_words,
    wait_for,
)
from gymvec.errors import SpaceMismatchError, error_detail, expect_set
from gymvec.subenvs.group import SubEnvGroup, run_request
from gymvec.wire.buffers import Buffers, as_buffer
from gymvec.wire.commands import Control

# A worker whose parent is gone: how often its watch looks (where no pidfd tells it at once),
# and how long the command loop then has to end by itself (closing its sub-envs) before the
# watch ends the process, whatever its main thread is doing (see ParentWatch).
PARENT_POLL_S = 0.25
PARENT_GONE_GRACE_S = 1.0
PARENT_GONE_EXIT = 70  # EX_SOFTWARE of sysexits.h


class Worker:
    """The command loop that runs in a worker process."""

    def __init__(
        self,
        group: SubEnvGroup,
        words: memoryview,
        conn,
        wake,
        done,
        spin_s: float,
        concurrency: Any = None,
        row_words: memoryview | None = None,
        ready: Any = None,
        parent: ParentWatch | None = None,
    ):
        self.group = group
        self.row_words = row_words  # its sub-envs' ROW_WORDS each (first-ready commands)
        self.ready = ready  # the semaphore a finished first-ready row posts
        self.concurrency = concurrency  # see ParallelVectorEnv's max_concurrency
        self.words = words
        self.conn = conn
        self.wake, self.done = wake, done
        self.spin = Spin(spin_s)
        self.parent = parent if parent is not None else ParentWatch()
        self.handlers: dict[int, Callable[[], Any]] = {
            Opcode.RUN: self.run,
            Opcode.RUN_WITH_PAYLOAD: self.run_with_payload,
            Opcode.REQUEST: self.request,
            Opcode.CLOSE: self.close,
            Opcode.RUN_SOME: self.run_some,
        }
        self.open = True
        self.fields_read = 0  # info-field messages adopted (see run_some)

    def parent_alive(self) -> bool:
        return not self.parent.gone()

    def loop(self) -> None:
        seq = 0
        while self.open:
            seq += 1
            try:
                wait_for(self.words, CMD_SEQ, seq, self.wake, self.spin, self.parent_alive)
            except PeerDied:
                break  # the parent is gone: nothing left to serve
            payload, status = None, Status.OK
            try:
                reply = self.handlers[int(self.words[CMD])]()  # IntEnum keys hash as ints
                # Pickled before the answer is posted: a reply that cannot be (an object
                # observation or info entry, say) is then this command's error.
                payload = None if reply is None else ForkingPickler.dumps(reply)
            except BaseException as exc:
                payload = ForkingPickler.dumps(error_detail(exc))
                status = Status.ERROR
            self.words[STATUS] = int(status)
            self.words[REPLY] = int(payload is not None)
            self.words[DONE_SEQ] = seq
            self.done.release()
            # After the done post: a large reply can then fill the pipe while the parent reads.
            if payload is not None:
                self.conn.send_bytes(payload)
        self.group.close()  # (after CLOSE, closed already: the parent is gone)

    def run(self, options: dict | None = None, only: int | None = None) -> dict | None:
        if self.concurrency is None:
            extras = self.group.run(options, only)
        else:
            with self.concurrency:
                extras = self.group.run(options, only)
        return extras or None

    def run_some(self) -> None:
        """Run the pending first-ready rows, lowest ticket first, publishing each one as
        soon as it is done; returns once none is pending (rows sent meanwhile included). A
        block's rows run together, once the parent has handed each of them its ticket."""
        # Python ints: a few are read per row, for a handful of rows
        words = expect_set(self.row_words, "the row words of a worker serving first-ready rows")
        group = self.group
        start = group.start
        rows = range(group.stop - start)
        while True:
            if self.words[FIELDS] > self.fields_read:
                self.adopt_fields()
            pending = [
                k for k in rows if words[k * ROW_WORDS + TICKET] > words[k * ROW_WORDS + FINISHED]
            ]
            if not pending:
                return None
            k = min(pending, key=lambda k: words[k * ROW_WORDS + TICKET])
            unit = [row - start for row in group.unit_of(start + k)]
            if len(unit) > 1 and not set(unit) <= set(pending):
                continue  # the parent is still handing out this block's tickets
            tickets = [words[u * ROW_WORDS + TICKET] for u in unit]
            try:
                extras = self.run(None, only=start + k) or {}
                # pickled before the rows are published: failing is their error
                payloads = [
                    (Status.OK, ForkingPickler.dumps((start + u, extras[start + u])))
                    if start + u in extras
                    else (Status.OK, None)
                    for u in unit
                ]
            except BaseException as exc:
                payloads = [
                    (Status.ERROR, ForkingPickler.dumps((start + u, error_detail(exc, start + u))))
                    for u in unit
                ]
            for u, ticket, (status, payload) in zip(unit, tickets, payloads):
                base = u * ROW_WORDS
                words[base + ROW_STATUS] = int(status)
                words[base + ROW_REPLY] = int(payload is not None)
                words[base + FINISHED] = ticket
                self.ready.release()
            for _status, payload in payloads:
                if payload is not None:  # after the posts, as a command's reply
                    self.conn.send_bytes(payload)

    def adopt_fields(self) -> None:
        """Adopt the info fields the parent sent while first-ready rows were in flight (see
        ``ProcessExecutor.add_info_fields_in_flight``), one message per count of ``FIELDS``."""
        while self.fields_read < self.words[FIELDS]:
            self.group.add_info_fields(cloudpickle.loads(self.conn.recv_bytes()))
            self.fields_read += 1

    def run_with_payload(self) -> dict | None:
        options, action_objects = self.conn.recv()
        if action_objects:
            self.group.set_action_objects(action_objects)
        return self.run(options)

    def request(self) -> Any:
        name, indices, kwargs = cloudpickle.loads(self.conn.recv_bytes())
        try:
            return ("ok", run_request(self.group, name, indices, kwargs))
        except Exception as exc:  # a sub-env's, or the caller's (a missing attribute, say)
            return ("raise", error_detail(exc))

    def close(self) -> None:
        """Close the sub-envs; what one raises is this command's error, which the parent
        raises once every worker has stopped (as it does for its own share's)."""
        self.open = False
        self.group.close()


class ParentWatch:
    """Tells a worker that the process that started it is gone, under every start method.

    ``os.getppid()`` alone cannot: a forkserver worker's parent is the forkserver, which its
    workers keep alive. The watch holds a pidfd of the real parent (readable once it exits),
    or else multiprocessing's parent sentinel (readable once every copy of its write end is
    closed), and also notes a change of ``getppid()`` (fork and spawn: re-parented).
    """

    def __init__(self) -> None:
        parent = mp.parent_process()
        self.ppid = os.getppid()
        self.dead = False
        self.fd: int | None = None
        pid = (parent.pid if parent is not None else None) or self.ppid
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already
            self.dead = True
        except (AttributeError, OSError):  # no pidfd here (not Linux 5.3+)
            self.fd = parent.sentinel if parent is not None else None

    def gone(self, wait_s: float = 0.0) -> bool:
        """Whether the parent is gone; waits up to ``wait_s`` for it to go."""
        if self.dead or os.getppid() != self.ppid:
            return True
        if self.fd is None:
            time.sleep(wait_s)
            return os.getppid() != self.ppid
        return bool(select.select([self.fd], [], [], wait_s)[0])

    def start_guard(self) -> None:
        """End this process soon after the parent's death, whatever its main thread does (a
        sub-env's endless step, a write to a pipe nobody reads): a daemon thread waits for
        the death, gives the command loop ``PARENT_GONE_GRACE_S`` to end by itself, then
        exits. (No shared file is left to remove: memmap blocks are unlinked files.)"""

        def guard() -> None:
            while not self.gone(PARENT_POLL_S):
                pass
            time.sleep(PARENT_GONE_GRACE_S)
            os._exit(PARENT_GONE_EXIT)

        threading.Thread(target=guard, name="gymvec-parent-guard", daemon=True).start()


def announcing(fns: list[Callable[[], Any]], start: int, words: Any) -> list[Callable[[], Any]]:
    """``fns``, each setting ``words[BUILDING]`` to 1 + its sub-env's index while it runs: the
    parent names the factory still running when start-up outlasts its timeout."""

    def announce(row: int, fn: Callable[[], Any]) -> Callable[[], Any]:
        def build() -> Any:
            words[BUILDING] = row + 1
            env = fn()
            words[BUILDING] = 0
            return env

        return build

    return [announce(start + k, fn) for k, fn in enumerate(fns)]


def close_inherited() -> None:
    """In a forked worker: close the parent's ends of the worker pipes it inherited (its
    own and other workers'), so that a write to the parent fails once the parent is gone
    instead of blocking on an end this process holds itself. (Spawned and forkserver workers
    start with none.)"""
    for conn in list(PARENT_ENDS):
        conn.close()


def worker_main(args: WorkerArgs, conn, wake, done) -> None:
    """Entry point of a worker process: build the sub-envs, then serve commands."""
    # A Ctrl-C in a terminal reaches every process of its group: it is the caller's to handle
    # (see BatchEngine.recv), and close() or the parent's death ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    close_inherited()
    parent = ParentWatch()
    parent.start_guard()
    if args.num_threads is not None:
        # Before anything imports torch (or numpy's BLAS): they read these when they load.
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(args.num_threads)
    words = sync_words(args.sync_memory, args.index)
    try:
        env_fns = announcing(cloudpickle.loads(args.env_fns_payload), args.start, words)
        if args.env_specs_payload is not None:
            add_missing_env_specs(cloudpickle.loads(args.env_specs_payload))
        where = f"worker {args.index}, pid {os.getpid()}"
        group = SubEnvGroup(
            env_fns, args.start, rows=args.rows, worker_index=args.index, where=where
        )
        if args.layout is None:  # a start in two phases: report the sub-envs, take the rows
            conn.send_bytes(ready_message(group.sub_env_summaries(), "built"))
            rows = cloudpickle.loads(conn.recv_bytes())
            if rows is None:  # the parent gave the start up
                group.close()
                return
            args = dataclasses.replace(args, **rows)
        layout = expect_set(args.layout, "the buffers' layout")
        buffers = Buffers(layout, args.memory)
        buffers.ship_objects = True
        group.attach(args.start, buffers, Control(layout.num_envs, args.control_memory))
        ready = ready_message(group.summaries())
    except SpaceMismatchError as exc:  # not the worker's fault: the parent raises it as is
        conn.send_bytes(cloudpickle.dumps(("mismatch", (str(exc), exc.kind))))
        return
    except BaseException as exc:
        conn.send_bytes(cloudpickle.dumps(("error", error_detail(exc))))
        return
    torch = sys.modules.get("torch")
    if torch is not None and args.num_threads is not None:  # the sub-envs use torch
        torch.set_num_threads(args.num_threads)
    # Everything built so far lives as long as the worker: keep the cyclic garbage collector
    # from walking it again and again (a forked worker inherits the parent's whole heap).
    gc.freeze()
    conn.send_bytes(ready)
    try:
        # this worker's rows' words, flat: row k's word W is item k * ROW_WORDS + W
        row_words = memoryview(as_buffer(args.rows_memory)).cast("B").cast("q")
        row_words = row_words[group.start * ROW_WORDS : group.stop * ROW_WORDS]
        worker = Worker(
            group,
            words,
            conn,
            wake,
            done,
            args.spin_s,
            args.concurrency,
            row_words,
            args.ready,
            parent,
        )
        worker.loop()
    except (EOFError, BrokenPipeError):
        pass
