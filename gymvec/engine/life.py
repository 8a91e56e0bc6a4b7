"""The life of the call in flight: what a timeout, a sub-env's error or an interrupt leaves
of it, decided in one place for every kind of call (the messages are ``wire.calls``')."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import numpy as np

from gymvec.backends.executor import Executor
from gymvec.errors import WorkerError
from gymvec.wire.calls import Call, Command, Request
from gymvec.wire.commands import RESET

C = TypeVar("C", Command, Request)


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
        self.interrupted = False  # the call in flight: its answers are to be dropped
        self.stuck: TimeoutError | None = None  # the timeout that ended the engine's use
        self.timed_out = False  # the last wait outlasted its timeout (the call is in flight)
        self.reset_required = False  # an interrupted command left the sub-envs unknown
        self.idle = True  # no call in flight and not stuck: a new call may start

    def wait_timeout(self, timeout: float | None) -> float | None:
        """The timeout a wait runs under: the caller's, else the engine's."""
        return self.timeout if timeout is None else timeout

    def post(self, call: C, send: Callable[[C], None]) -> None:
        """Post ``call`` with ``send`` (the executor's): it is then in flight. An error
        refused it before anything went out; an interrupt may have left some workers running
        it, so it is in flight, interrupted."""
        try:
            send(call)
        except Exception:
            raise
        except BaseException:
            self.call, self.interrupted, self.idle = call, True, False
            raise
        self.call, self.idle = call, False

    def wait(self, call: Call, wait: Callable[..., Any], timeout: float | None, *args: Any) -> Any:
        """``wait(call, timeout, *args)`` (the executor's), under the engine's timeout where
        the caller gives none: what it returns ends the call, what it raises is judged by
        :meth:`wait_failed`."""
        try:
            result = wait(call, self.timeout if timeout is None else timeout, *args)
        except BaseException as exc:
            self.wait_failed(exc, timeout)
            raise  # after a timeout still in flight: a later receive resumes the wait
        self.call, self.timed_out, self.idle = None, False, True  # (not stuck: it answered)
        return result

    def wait_failed(self, exc: BaseException, given: float | None) -> None:
        """A wait for the call in flight raised ``exc`` (``given``: the caller's timeout)."""
        if isinstance(exc, TimeoutError):
            self.timed_out = True
            if given is None and self.timeout is not None:  # the engine's own timeout
                self.stuck = exc
        elif isinstance(exc, Exception):
            # A sub-env raised (or a worker died): every worker has answered or is gone.
            self.call, self.idle = None, self.stuck is None
        else:
            self.interrupted = True

    def ended(self) -> None:
        """The call in flight is over."""
        self.call, self.interrupted, self.timed_out = None, False, False
        self.idle = self.stuck is None

    def abandon(self) -> None:
        """Give the call in flight up: its answers are read and dropped by the next call."""
        if self.call is not None:
            self.interrupted = True

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
        if call is not None and self.interrupted:
            self.drain(executor)
        elif call is not None:
            raise RuntimeError(f"a {call.kind} is already in flight: receive it first (recv())")

    def drain(self, executor: Executor, timeout: float | None = None) -> None:
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
            self.ended()
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
            self.drain(executor, timeout)
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
