"""Ray actors started again (faults that heal, API section 13).

With ``on_fault`` restarting, the engine asks the executor to heal deaths
(``RayExecutor.heal_deaths``): an actor found dead in a whole-batch command (``ray.kill``, its
process ended, its node lost), or one still busy past the engine's ``timeout=`` (killed here),
gets a new actor in its place: the same ``.options()`` (its bundle of the placement group
included), its sub-envs built from the factories' current kwargs over the same rows, its
buffers laid out again, healing on (the ``heal_faults`` request, ``rebuilt=True``). Every
sub-env it held is reported as a fault (``Extras.fault``: ``("death", "worker 1 (Ray actor on
node ...) died: ...", None)`` or ``("timeout", "timed out after 1.0 s", None)``), which the
engine books as it books a sub-env that raised (``engine/healing.py``): the rows read as
truncated with their last observation, and past the policy's limit a ``WorkerError`` ends the
run. The other actors' answers of that command stand.

In first-ready commands (:meth:`RayRespawner.start_again_some`) the rows of the dead or hung
actor's calls in flight finish as faults at once; its other rows owe theirs to their next
first-ready command (``RayExecutor.owed``), while the other actors' rows keep flowing. An actor
that died in a request fails it; the next command finds it dead and starts it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gymvec.backends import pickling
from gymvec.backends.processes.signals import env_specs_payload
from gymvec.backends.ray.handle import RayHandle
from gymvec.backends.ray.worker import worker_spec
from gymvec.wire.commands import Extras

EnvFnsOf = Callable[[int], list[Callable[[], Any]]]  # worker -> its sub-envs' factories


class RayRespawner:
    """Starts an actor again where its old one died or hung (see the module docstring).
    ``executor``: the ``RayExecutor`` (typed Any: it imports this module); ``env_fns_of(w)``:
    worker ``w``'s factories, with their current kwargs."""

    def __init__(self, executor: Any, env_fns_of: EnvFnsOf):
        self.executor = executor
        self.env_fns_of = env_fns_of
        self.owed: dict[int, Extras] = {}  # faults of actors started again outside a wait

    def take_owed(self) -> dict[int, Extras]:
        """The faults of the actors started again since the last wait (:meth:`end_busy`)."""
        owed, self.owed = self.owed, {}
        return owed

    def end_busy(self, timeout: float) -> bool:
        """The command in flight (or a first-ready wait) outlasted the engine's ``timeout``:
        kill the actors still busy with it and start them again; their rows' faults come
        with the resumed wait. Returns False where none was busy (the timeout stands)."""
        ray, handles = self.executor.ray, self.executor.handles
        busy = [h for h in handles if h.ref is not None]
        queued = [h for h in handles if h.queue]  # (first-ready calls, the oldest first)
        refs = [h.ref for h in busy] + [h.queue[0][0] for h in queued]
        if not refs:
            return False
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        message = f"timed out after {timeout} s"
        for handle in busy:
            if handle.ref not in ready:
                self.owed.update(self.respawn(handle, "timeout", message))
        hung = [handle for handle in queued if handle.queue[0][0] not in ready]
        for handle in hung:
            self.start_again_some(handle, "timeout", message)
        return bool(busy) or bool(hung)

    def start_again_some(self, handle: RayHandle, kind: str, message: str) -> None:
        """In first-ready commands, ``handle``'s actor died or hung: start it again (see
        :meth:`respawn`). Its rows in flight finish now as faults of ``kind``; its other
        rows, those finished but not taken included, owe theirs to their next first-ready
        command, which does not run them (their sub-envs are new)."""
        executor = self.executor
        in_flight = [row for _, share in handle.queue for row in share]
        handle.queue.clear()
        faults = self.respawn(handle, kind, message)
        for row in in_flight:
            executor.finished[row] = faults.pop(row)
        executor.owed.update(faults)

    def respawn(self, handle: RayHandle, kind: str, message: str) -> dict[int, Extras]:
        """End ``handle``'s actor, start a new one in its place, ready and healing; returns
        the faults of its rows."""
        executor = self.executor
        ray = executor.ray
        try:
            ray.kill(handle.actor, no_restart=True)  # (its bundle is free for the new one)
        except Exception:  # gone with its node
            pass
        handle.ref = None
        w = handle.index
        k = executor.handles.index(handle)
        actor = executor.actor_class.options(**executor.actor_options[w]).remote(w)
        new = RayHandle(w, handle.start, handle.stop, actor)
        executor.handles[k] = new
        fns, sizes = self.env_fns_of(w), executor.sub_env_sizes[w]
        spec = worker_spec(executor.options, executor.shared, w, fns, sizes, env_specs_payload())
        executor._started([actor.start.remote(spec)], "start again", [new])
        new.lay_out(executor.shared)
        rows = list(range(new.stop - new.start))
        payload = pickling.dumps(("heal_faults", rows, {"rebuilt": True}))
        try:
            reply = ray.get(actor.request.remote(payload), timeout=executor.options.startup_timeout)
        except ray.exceptions.RayError as exc:
            raise new.died(exc) from None
        if reply[0] != "ok":
            raise new.raised(reply[1], what="heal_faults")
        return {new.start + row: Extras(fault=(kind, message, None)) for row in rows}
