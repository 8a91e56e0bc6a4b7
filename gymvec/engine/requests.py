"""Requests: attribute access and method calls on sub-envs, by name (``subenvs.REQUESTS``).

:class:`Requests` is the engine's request half, which it exposes as ``request``,
``request_send`` and ``request_recv``. A request is a call like a command (one in flight at a
time, its life in ``CallLife``), but carries no mode bytes and touches no buffers.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gymvec.subenvs.group import REQUESTS
from gymvec.wire.calls import Request

if TYPE_CHECKING:
    from gymvec.engine.engine import BatchEngine


class Requests:
    """The requests of a :class:`~gymvec.engine.BatchEngine` (see the module)."""

    def __init__(self, engine: BatchEngine):
        # A proxy: the engine holds this part (and its verbs), so a plain reference back
        # would make a cycle that keeps the engine's memory until the garbage collector runs.
        self.engine = weakref.proxy(engine)

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
        n = self.engine.num_envs
        if name not in REQUESTS:
            raise ValueError(f"request: expected one of {sorted(REQUESTS)}, got {name!r}")
        indices = list(range(n)) if indices is None else [int(i) for i in indices]
        for i in indices:
            if not 0 <= i < n:
                raise IndexError(f"sub-env index {i} out of range for {n} sub-envs")
        values = kwargs.pop("values", None)
        if values is not None and len(values) != len(indices):
            raise ValueError(f"values: expected {len(indices)} values, got {len(values)}")
        engine = self.engine
        life = engine.life
        life.check_not_stuck()
        executor = engine.executor
        life.clear(executor)
        engine.first_ready.check_none_flying()
        request = Request(name, indices, kwargs, values)
        try:
            executor.request_send(request)
        except BaseException as exc:
            life.post_failed(request, exc)
            raise
        life.call = request

    def recv(self, timeout: float | None = None) -> list:
        """The results of the request in flight, one per index."""
        engine = self.engine
        life = engine.life
        life.check_not_stuck()
        call = life.call
        if call is None or call.kind != "request":
            life.refuse_recv(engine.executor, "request", timeout)
        try:
            results = engine.executor.request_wait(call, life.wait_timeout(timeout))
        except BaseException as exc:
            life.wait_failed(call, exc, timeout)
            raise
        life.ended()
        return results
