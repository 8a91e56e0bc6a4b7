"""Requests: attribute access and method calls on sub-envs, by name (``subenvs.REQUESTS``).

:class:`Requests` is the engine's request half, which it exposes as ``request``,
``request_send`` and ``request_recv``. A request is a call like a command (one in flight at a
time, its life in ``CallLife``), but carries no mode bytes and touches no buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymvec.engine.life import CallLife
from gymvec.engine.slot import ExecutorSlot
from gymvec.subenvs.group import REQUESTS
from gymvec.wire.calls import Request


class Requests:
    """The requests of a :class:`~gymvec.engine.BatchEngine` (see the module).

    Args:
        slot: the engine's executor (started on first use).
        life: the engine's call in flight.
        num_envs: how many sub-envs there are.
        check_none_flying: raises while first-ready commands are in flight.
    """

    def __init__(
        self,
        slot: ExecutorSlot,
        life: CallLife,
        num_envs: int,
        check_none_flying: Callable[[], None],
    ):
        self.slot = slot
        self.life, self.num_envs = life, num_envs
        self.check_none_flying = check_none_flying

    def request(
        self, name: str, indices: Sequence[int] | None = None, /, *, timeout=None, **kwargs: Any
    ) -> list:
        """Run request ``name`` (see ``subenvs.REQUESTS``) on the sub-envs at ``indices``
        (all if None) and return one result per index. ``values`` (a keyword of set_attr
        and load_state_dict) holds one value per index."""
        self.send(name, indices, **kwargs)
        return self.recv(timeout)

    def send(self, name: str, indices: Sequence[int] | None = None, /, **kwargs: Any) -> None:
        """Start request ``name`` (see :meth:`request`); :meth:`recv` takes its results."""
        n = self.num_envs
        if name not in REQUESTS:
            raise ValueError(f"request: expected one of {sorted(REQUESTS)}, got {name!r}")
        indices = list(range(n)) if indices is None else [int(i) for i in indices]
        for i in indices:
            if not 0 <= i < n:
                raise IndexError(f"sub-env index {i} out of range for {n} sub-envs")
        values = kwargs.pop("values", None)
        if values is not None and len(values) != len(indices):
            raise ValueError(f"values: expected {len(indices)} values, got {len(values)}")
        life = self.life
        life.check_not_stuck()
        executor = self.slot.executor
        life.clear(executor)
        self.check_none_flying()
        life.post(Request(name, indices, kwargs, values), executor.request_send)

    def recv(self, timeout: float | None = None) -> list:
        """The results of the request in flight, one per index."""
        life = self.life
        life.check_not_stuck()
        call = life.call
        executor = self.slot.executor
        if not isinstance(call, Request):
            life.refuse_recv(executor, "request", timeout)
        return life.wait(call, executor.request_wait, timeout)
