"""The protocol between ``ParallelEnv``'s parent process and its worker processes: what
both sides import (the worker's loop is ``worker.py``, the parent's end ``handles.py``).

Signalling (one round trip per command): each worker owns a cache line of int64 "sync words"
in shared memory and two semaphores. The parent writes the command, bumps ``CMD_SEQ`` and
posts ``wake``; the worker spins on ``CMD_SEQ`` for a short while (cheap when it has a core to
itself: the next command usually arrives within microseconds) and otherwise blocks on ``wake``.
The answer comes back the same way through ``DONE_SEQ`` and ``done``. The sequence words are
the truth and the semaphores only wake sleepers, so a post that nobody waited for is harmless:
the next wait sees an old sequence number and waits again. Posting is cheap when nobody sleeps
(a futex syscall only happens when a waiter blocks).

First-ready commands (``RUN_SOME``) go to single sub-envs: each sub-env has its own "row
words" in a second shared block, ``TICKET`` (the parent's count of first-ready commands when
it sent this one) and ``FINISHED`` (the ticket of the last one done). The worker runs its
pending rows (``TICKET > FINISHED``) one at a time, lowest ticket first (the order sent),
publishes each as soon as it is done (``ROW_STATUS``, ``ROW_REPLY``, then ``FINISHED``) and
posts the ``ready`` semaphore that every worker shares, so the parent can return it while the
worker's other rows still run. A row's extras or error follow on the pipe as
``(row, payload)``. Info fields the parent learns meanwhile come on the pipe too, counted by the
``FIELDS`` word, which the worker reads before each row (see ``Worker.run_some``).

Everything that is not per-step data travels over a pipe: the worker's first message (ready or
the factory's traceback), request replies, error tracebacks, the info entries that have no
buffer slot ("extras") and the values of object leaves (see ``BufferLayout``) both ways; the
``REPLY`` word says whether such a message follows a command.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle

from gymvec.subenvs.group import SubEnvSummary
from gymvec.wire.buffers import BufferLayout

SYNC_WORDS = 8  # int64 words per worker: one 64-byte cache line
# BUILDING: 1 + the sub-env whose factory runs during start-up (0: none), for the start-up error
CMD_SEQ, CMD, DONE_SEQ, STATUS, REPLY, FIELDS, BUILDING = range(7)
ROW_WORDS = 8  # int64 words per sub-env (first-ready commands): one cache line
TICKET, FINISHED, ROW_STATUS, ROW_REPLY = range(4)

# How long a blocked waiter sleeps before it checks that the other side is still alive.
LIVENESS_POLL_S = 0.05


def sync_words(sync_memory: Any, k: int) -> memoryview:
    """The sync words of worker process ``k``, as int64 items of a memoryview: they are read
    and written a few times per command on each side, and a memoryview item is a plain
    Python int, several times cheaper to get or set than a numpy scalar."""
    return memoryview(sync_memory).cast("B").cast("q")[k * SYNC_WORDS : (k + 1) * SYNC_WORDS]


class Opcode(enum.IntEnum):
    """What the parent asks of a worker: the ``CMD`` word of a command."""

    RUN = 1  # carry out the mode bytes of this worker's rows
    RUN_WITH_PAYLOAD = 2  # the same, with (reset options, object actions) read from the pipe
    REQUEST = 3  # a slow-path request read from the pipe
    CLOSE = 4
    RUN_SOME = 5  # run this worker's pending first-ready rows (see the row words)


class Status(enum.IntEnum):
    OK = 0
    ERROR = 1


class PeerDied(Exception):
    """The process on the other side of the sync words is gone."""


class Spin:
    """How long a waiter spins before it blocks, backing off while spinning nearly always fails.

    A spin that ends without its answer (the other side was slower, or was descheduled because
    something else holds a core) burns a core another process may need, but stopping costs
    every later wait a wake-up on the critical path. So the waiter stops spinning only where
    spins hardly ever catch the answer (sub-envs slower than the spin, say): when failures
    outnumber successes ``SUCCESS_CREDIT`` to one over a run of waits, it blocks at once for
    ``BACKOFF_WAITS`` waits, then tries spinning again. Bursts of failures, as on a host whose
    cores slow down for a while, leave it spinning.
    """

    BACKOFF_WAITS = 256
    FAILURES = 32  # this many more failures than SUCCESS_CREDIT times the successes back off
    SUCCESS_CREDIT = 8

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._debt = 0
        self._paused = 0

    def budget(self) -> float:
        """Seconds to spin in the next wait."""
        if self._paused:
            self._paused -= 1
            return 0.0
        return self.seconds

    def record(self, caught: bool) -> None:
        """The outcome of a wait that spun: whether the spin caught the answer."""
        if caught:
            self._debt = max(self._debt - self.SUCCESS_CREDIT, 0)
            return
        self._debt += 1
        if self._debt >= self.FAILURES:
            self._debt, self._paused = 0, self.BACKOFF_WAITS


def wait_for(
    words: Any,
    slot: int,
    value: int,
    sem: Any,
    spin: Spin,
    is_alive: Callable[[], bool],
    timeout: float | None = None,
) -> None:
    """Wait until ``words[slot] >= value``: spin (see :class:`Spin`), then block on ``sem``.

    Raises :class:`PeerDied` when ``is_alive()`` turns false and ``TimeoutError`` after
    ``timeout`` seconds.
    """
    if words[slot] >= value:
        sem.acquire(False)  # consume the post that came with it, if it is there yet
        return
    spin_s = spin.budget() if spin._paused else spin.seconds  # (runs every wait: no call then)
    if spin_s > 0:
        end = time.perf_counter() + spin_s
        while time.perf_counter() < end:
            if words[slot] >= value:
                sem.acquire(False)
                spin.record(True)
                return
        spin.record(False)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        poll = LIVENESS_POLL_S
        if deadline is not None:
            poll = min(poll, max(deadline - time.monotonic(), 0.0))
        sem.acquire(True, poll)
        if words[slot] >= value:
            return
        if not is_alive():
            raise PeerDied
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError


# ---- the start: the messages of a worker's first moments ------------------------------
def env_specs_payload() -> bytes:
    """The gymnasium registry of this process, pickled (entries that cannot be are left out)."""
    import gymnasium

    specs = []
    for spec in gymnasium.registry.values():
        try:
            specs.append(cloudpickle.dumps(spec))
        except Exception:  # e.g. unpicklable kwargs: that id only works where it is registered
            continue
    return cloudpickle.dumps(specs)


def add_missing_env_specs(pickled_specs: list[bytes]) -> None:
    """Register the parent's ids that this process does not know (after the factories were
    unpickled: the modules they import register their own ids first).

    A package the parent imported inside its main code (ale_py, say) registers its ids
    again when an entry point imports it here: gymnasium then warns that each copied id is
    overridden (by the same spec). Those warnings, for the copied ids only, are silenced.
    """
    import gymnasium

    copied = []
    for payload in pickled_specs:
        try:
            spec = cloudpickle.loads(payload)
        except Exception:  # needs a module only the parent has: skip, like an unknown id
            continue
        if spec.id not in gymnasium.registry:
            gymnasium.registry[spec.id] = spec
            copied.append(spec.id)
    if copied:
        ids = "|".join(re.escape(env_id) for env_id in copied)
        # gymnasium's words (after its colour codes): registration.register's warning
        pattern = rf".*Overriding environment ({ids}) already in registry\."
        warnings.filterwarnings("ignore", message=pattern, category=UserWarning)


def ready_message(summaries: list[SubEnvSummary], kind: str = "ready") -> bytes:
    """The worker's first message (``kind`` "built": the first of a start in two phases); an
    ``EnvSpec`` that cannot travel (a wrapper's lambda in its kwargs, say) is left out rather
    than failing the start."""
    try:
        return cloudpickle.dumps((kind, summaries))
    except Exception:
        summaries = [dataclasses.replace(s, env_spec=None) for s in summaries]
        return cloudpickle.dumps((kind, summaries))


def attach_message(start: int, shared: Any, rows_memory: Any) -> bytes:
    """What a worker started in two phases takes its rows from (see ``worker_main``):
    its first row and the memory blocks (passed as descriptors: it runs already)."""
    fields = {
        "start": start,
        "layout": shared.layout,
        "memory": shared.memory,
        "control_memory": shared.control_memory,
        "rows_memory": rows_memory,
    }
    return cloudpickle.dumps(fields)


# The message that ends a worker waiting for its rows (see attach_message).
GIVE_UP = cloudpickle.dumps(None)


# The parent's ends of the worker pipes of this process (ProcessExecutor adds each one): a
# forked worker inherits them, and closes them (see close_inherited).
PARENT_ENDS: weakref.WeakSet = weakref.WeakSet()


@dataclasses.dataclass
class WorkerArgs:
    """What a worker process starts from (besides its pipe and semaphores).

    ``env_specs_payload``: the parent's gymnasium registry (spawn and forkserver workers start
    from a fresh one), so that ids registered at run time in the parent work in factories.
    ``concurrency``: a semaphore the groups hold while they run a command (``max_concurrency``).
    """

    index: int  # among the worker processes: where its sync words are
    env_fns_payload: bytes  # its sub-envs' factories, cloudpickled
    start: int  # its first row (without a layout: its first sub-env)
    layout: BufferLayout | None  # None: a start in two phases (see attach_message)
    memory: Any
    control_memory: Any
    sync_memory: Any
    spin_s: float
    num_threads: int | None
    env_specs_payload: bytes | None = None
    concurrency: Any = None
    rows_memory: Any = None  # the row words of every sub-env (first-ready commands)
    ready: Any = None  # the semaphore a finished first-ready row posts
    rows: tuple[int, ...] | None = None  # the rows of each sub-env (blocks fill several)
