"""The engine's executor, started on first use: :class:`ExecutorSlot`, which the engine and
its parts (``first_ready``, ``requests``) hold instead of the engine itself."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

from gymvec.backends.backend import Backend
from gymvec.backends.executor import Executor
from gymvec.errors import ClosedEnvError


class ExecutorSlot:
    """Where the running executor is kept (``current``: None until the first use and after a
    restart); ``start()`` starts one (set once the start is planned, see ``planning.py``)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.start: Callable[[], Executor] | None = None
        self.current: Executor | None = None
        self.on_start: Callable[[Executor], None] | None = None  # (healing: see engine.py)
        self.closed = False
        self._finalizer: Any = None

    @property
    def executor(self) -> Executor:
        """The running executor; the sub-envs are built on first use."""
        if self.closed:
            raise ClosedEnvError("the env is closed: create a new one to go on")
        if self.current is None:
            if self.start is None:
                raise RuntimeError("the engine's start is not planned yet")
            executor = self.started(self.start())
            if self.on_start is not None:
                self.on_start(executor)
            return executor
        return self.current

    def started(self, executor: Executor) -> Executor:
        """Keep ``executor`` as the running one."""
        self.current = executor
        if self.backend.collect_on_exit:
            # Stop the workers (and free a memmap file) even if the user never closes
            # (before multiprocessing's own exit handler would wait for them forever).
            self._finalizer = weakref.finalize(
                self, _shutdown, executor, self.backend.release, os.getpid()
            )
        return executor

    def take(self) -> Executor | None:
        """The running executor (None if none), no longer kept: the caller closes it."""
        executor, self.current = self.current, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return executor


def _shutdown(executor: Executor, release: Callable[[], None], owner_pid: int) -> None:
    # A forked process inherits the engine, garbage or not: its collector may free it there
    # too, but the workers and the memory are the owner's to end.
    if os.getpid() != owner_pid:
        return
    executor.close()
    release()
