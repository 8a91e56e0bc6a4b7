"""The records of a call (a command or a request) and the life of the call in flight.

A :class:`Command` (step or reset of every sub-env) and a :class:`Request` (attribute access
and method calls by name) are what the engine hands its executor; each also records how far
the executor's wait got, so that a wait cut short by a ``TimeoutError`` resumes where it
stopped and an interrupted one is drained before the next call. :class:`CallLife` holds the
call in flight and decides, in one place, what a timeout, a sub-env's error or an interrupt
leaves of it. :class:`Received` and :class:`Ready` are what a whole-batch and a first-ready
receive return beside the buffers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Union

import numpy as np

from gymvec.errors import WorkerError
from gymvec.wire.commands import RESET, Autoreset, Extras

if TYPE_CHECKING:
    from gymvec.backends.executor import Executor

Into = Literal["root", "next"]  # where a reset writes: the root, or "next" as a transition
InfoPlaces = dict  # learnt info fields: {name: (InfoField, offset)} (see BufferLayout)


class Received(NamedTuple):
    """What ``BatchEngine.recv`` returns beside the buffers.

    ``kind``: the command it ends, "step" or "reset"; ``mask``: the sub-envs a reset reset
    (None: all). ``extras``: by sub-env index, what each reported that has no place in the
    buffers. ``observations``: the handed-out observation lane that holds "next"'s
    observations (an array nobody else refers to, see ``Buffers.handed_out_lanes``), or None
    when they are in ``buffers.next`` itself. ``info_places``: info fields learnt from these
    results (see ``BatchEngine.learn_info_fields``) for the caller to hand to
    ``adopt_info_fields`` (None: none).
    """

    kind: str
    mask: np.ndarray | None
    extras: dict[int, Extras]
    observations: np.ndarray | None
    info_places: InfoPlaces | None = None


class Ready(NamedTuple):
    """What ``BatchEngine.async_recv`` returns beside the buffers.

    ``indices``: the sub-envs whose first-ready command finished (int64, first finished
    first); their results are in their rows of the buffers until they are sent another
    command. ``extras``: by sub-env index, what each reported that has no place in the buffers.
    ``info_places``: as :class:`Received`'s.
    """

    indices: np.ndarray
    extras: dict[int, Extras]
    info_places: InfoPlaces | None = None


class Command:
    """A step or reset of every sub-env, as the engine and its executor share it (a plain
    class with slots: one is made every step)."""

    __slots__ = (
        "kind",
        "autoreset",
        "into",
        "options",
        "mask",
        "action_objects",
        "lane",
        "interrupted",
        "extras",
        "local_error",
    )

    def __init__(
        self,
        kind: Literal["step", "reset"],
        autoreset: Autoreset = Autoreset.NONE,
        *,
        into: Into = "root",
        options: dict | None = None,
        mask: np.ndarray | None = None,
    ):
        self.kind = kind
        self.autoreset = autoreset  # a step's policy for finished sub-envs
        self.into = into  # where a reset writes
        self.options = options  # the reset options
        self.mask = mask  # the sub-envs a reset resets (None: all of them)
        self.action_objects: dict[tuple, list] | None = None  # all sub-envs' (see Buffers)
        self.lane = 0  # the observation lane "next"'s observations go to (0: none)
        # progress of the executor's wait
        self.interrupted = False  # a wait was interrupted: its answers are to be dropped
        self.extras: dict[int, Extras] | None = None  # answers so far (None: local share due)
        self.local_error: Exception | None = None  # what this process's share raised


class Request:
    """A request by name to some sub-envs (``subenvs.REQUESTS``), as the engine and its
    executor share it."""

    __slots__ = (
        "name",
        "indices",
        "kwargs",
        "values",
        "interrupted",
        "local_done",
        "local_error",
        "results",
        "plan",
    )
    kind = "request"

    def __init__(self, name: str, indices: list[int], kwargs: dict, values: Sequence | None = None):
        self.name = name
        self.indices = indices  # the sub-envs it goes to
        self.kwargs = kwargs
        self.values = values  # one value per index (set_attr, load_state_dict), or None
        self.interrupted = False  # see Command
        self.local_done = False  # this process's share has answered
        self.local_error: Exception | None = None  # what this process's share raised
        self.results: list | None = None  # the results so far, one per index
        self.plan: Any = None  # the executor's own record of where it went


Call = Union[Command, Request]  # noqa: UP007 (a runtime alias, also for isinstance readers)


class CallLife:
    """The call in flight and what ends it, decided here for every kind of call.

    A wait that returns, or raises a sub-env's error, ends the call. A ``TimeoutError`` leaves
    it in flight (a later receive resumes the wait); past the engine's own ``timeout`` the
    engine is ``stuck`` and refuses further calls. Anything else (a KeyboardInterrupt) marks
    it interrupted: the next call drains it, and after a command the sub-envs' states are
    unknown, so the next command must reset them all (``reset_required``).
    """

    def __init__(self, timeout: float | None):
        self.timeout = timeout  # the engine's own, for waits given none
        self.call: Call | None = None
        self.stuck: TimeoutError | None = None  # the timeout that ended the engine's use
        self.timed_out = False  # the last wait outlasted its timeout (the call is in flight)
        self.reset_required = False  # an interrupted command left the sub-envs unknown

    def wait_timeout(self, timeout: float | None) -> float | None:
        """The timeout a wait runs under: the caller's, else the engine's."""
        return self.timeout if timeout is None else timeout

    def post_failed(self, call: Call, exc: BaseException) -> None:
        """Posting ``call`` raised ``exc``: an error refused it before anything went out; an
        interrupt may have left some workers running it, so it is in flight, interrupted."""
        if not isinstance(exc, Exception):
            call.interrupted = True
            self.call = call

    def wait_failed(self, call: Call, exc: BaseException, given: float | None) -> None:
        """A wait for ``call`` raised ``exc`` (``given``: the timeout the caller gave)."""
        if isinstance(exc, TimeoutError):
            self.timed_out = True
            if given is None and self.timeout is not None:  # the engine's own timeout
                self.stuck = exc
        elif isinstance(exc, Exception):
            # A sub-env raised (or a worker died): every worker has answered or is gone.
            self.call = None
        else:
            call.interrupted = True

    def ended(self) -> None:
        """The call in flight is over."""
        self.call = None
        self.timed_out = False

    def give_up(self) -> None:
        """Give the call in flight up: its answers are read and dropped by the next call."""
        if self.call is not None:
            self.call.interrupted = True

    def check_not_stuck(self) -> None:
        """A RuntimeError once a call outlasted the engine's own timeout."""
        if self.stuck is not None:
            raise RuntimeError(
                f"a call timed out under the env's timeout of {self.timeout} s ({self.stuck}); "
                "the env cannot go on: close() it (which ends the busy workers) and make a new one"
            )

    def clear(self, executor: Executor) -> None:
        """Make way for a new call: drain an interrupted one; refuse while one is in flight."""
        call = self.call
        if call is not None and call.interrupted:
            self.abandon(executor)
        elif call is not None:
            raise RuntimeError(f"a {call.kind} is already in flight: receive it first (recv())")

    def abandon(self, executor: Executor, timeout: float | None = None) -> None:
        """End an interrupted call: wait for the worker processes' answers and drop them (a
        dead worker still raises WorkerError); after a command, the next one must reset every
        sub-env. Interrupted again, or past ``timeout``, the call stays in flight."""
        call = self.call
        if call is None:
            return
        if call.kind != "request":
            self.reset_required = True
        try:
            executor.drain(call, timeout)
        except WorkerError:  # a worker died: the call is over all the same
            self.call = None
            raise
        self.ended()

    def refuse_recv(self, executor: Executor | None, kind: str, timeout: float | None) -> NoReturn:
        """Why a receive of ``kind`` ("command" or "request") cannot run now."""
        self.check_not_stuck()
        call = self.call
        is_request = call is not None and call.kind == "request"
        if call is None or is_request != (kind == "request"):
            verbs = "request_send()" if kind == "request" else "step_send() or reset_send()"
            raise RuntimeError(f"no {kind} in flight: call {verbs} first")
        # an interrupted call: its results are gone with the interrupted wait
        if executor is not None:  # (None: nothing ever started, so nothing to drain)
            self.abandon(executor, timeout)
        raise RuntimeError(
            "the command in flight was interrupted: its results are lost, and every "
            "sub-env must be reset before the next step"
        )

    def check_resets_all(self, modes: Any) -> None:
        """After an interrupted command, only a reset of every sub-env may come."""
        resets = np.bitwise_and(np.asarray(modes, dtype=np.uint8), np.uint8(RESET))
        if not resets.all():
            raise RuntimeError(
                "a call was interrupted while its sub-envs ran, so their states are unknown: "
                "reset every sub-env (reset() without a mask) before anything else"
            )
        self.reset_required = False
