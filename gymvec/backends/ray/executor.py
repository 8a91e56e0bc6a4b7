"""Sub-envs on Ray actors, across the nodes of a cluster: the executor of ``RayEnv``.

One actor per worker (``worker.RayWorker``), placed through a placement group
(``placement="spread"``: on distinct nodes where the cluster has them). The engine's buffers
stay in the driver's memory; per command, :class:`RayExecutor` makes one remote call per actor
carrying that actor's rows of the control bytes and actions as two flat arrays, and copies what
comes back (the root and/or ``"next"`` rows the command wrote, as flat arrays) into the
buffers. The engine above it and both front ends are the same as for ``SerialEnv`` and
``ParallelEnv``.

A dead actor (killed, its node lost) makes Ray fail the call's result at once; it surfaces as
``gymvec.WorkerError`` naming the worker and its node, or, with ``on_fault`` restarting, a new
actor takes its place (``respawn.py``). Ray is imported only here, and only when a ``RayEnv``
is made.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle

from gymvec.backends import pickling
from gymvec.backends.executor import (
    Call,
    Command,
    Executor,
    Meanwhile,
    Request,
    SharedMemory,
    first_ready_objects_error,
    group_indices,
    request_kwargs,
    take_finished,
    void_owed_faults,
)
from gymvec.backends.processes.signals import env_specs_payload
from gymvec.backends.ray.handle import RayHandle
from gymvec.backends.ray.respawn import RayRespawner
from gymvec.backends.ray.worker import RayWorker, worker_spec
from gymvec.errors import (
    SpaceMismatchError,
    SubEnvTimeoutError,
    WorkerError,
    expect_set,
)
from gymvec.subenvs.group import SubEnvSummary
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire.buffers import private_memory
from gymvec.wire.calls import Take
from gymvec.wire.commands import Extras

INSTALL_HINT = (
    "RayEnv needs Ray: pip install ray (or, in gymvec's checkout, pip install -e '.[ray]')"
)
PLACEMENTS = {"spread": "SPREAD", "strict_spread": "STRICT_SPREAD", "pack": "PACK", None: None}
CLOSE_TIMEOUT_S = 5.0  # how long close() waits for an actor to close its sub-envs


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return ray


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """How a ``RayEnv``'s actors run (see ``RayEnv`` for each option)."""

    address: str | None = None
    worker_processes: int = 1
    actor_options: dict | None = None
    placement: str | None = "spread"
    startup_timeout: float = 120.0
    start_method: str = "spawn"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"placement: expected one of {sorted(p for p in PLACEMENTS if p)} or None, "
                f"got {self.placement!r}"
            )
        count = self.worker_processes
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"worker_processes: expected a positive int, got {count!r}")


def connect(address: str | None) -> Any:
    """Ray, initialised: the running instance if there is one, else ``address`` joined (None:
    a new local instance, without the dashboard)."""
    ray = import_ray()
    if not ray.is_initialized():
        if address is None:
            ray.init(include_dashboard=False)
        else:
            ray.init(address=address)
    return ray


_actor_class: Any = None


def _remote_worker_class(ray: Any) -> Any:
    global _actor_class
    if _actor_class is None:
        # max_restarts=0: an actor that died stays dead, and the batch says so
        _actor_class = ray.remote(max_restarts=0, max_task_retries=0)(RayWorker)
    return _actor_class


class RayExecutor(Executor):
    """Starts one Ray actor per worker and drives them, one remote call per actor per command.

    Args:
        worker_env_fns: per worker, the factories of its sub-envs (rows ``worker_bounds``).
        worker_bounds: per worker, its row range.
        shared: the engine's buffers and control block (in this process's memory); None:
            a start in two phases (see ``Executor.attach``), ``worker_bounds`` then each
            worker's sub-envs.
        options: where and how the actors run.
    """

    def __init__(
        self,
        worker_env_fns: list[list[Callable[[], Any]]],
        worker_bounds: list[tuple[int, int]],
        shared: SharedMemory | None,
        options: RayOptions,
        sub_env_sizes: Sequence[Sequence[int]] | None = None,
    ):
        self.ray = ray = connect(options.address)
        self.options = options
        self.shared = shared
        self.handles: list[RayHandle] = []
        self.placement_group: Any = None
        self.last_lane = 0
        self.bounds = list(worker_bounds)
        self.finished: dict[int, Extras | None] = {}  # first-ready rows done, not yet taken
        # first-ready rows of an actor started again: their next first-ready command is not
        # sent, it comes back as this fault (see RayRespawner.start_again_some)
        self.owed: dict[int, Extras] = {}
        self._lost: list[int] = []
        self.respawner: Any = None  # dead or hung actors start again (see heal_deaths)
        self.actor_options: list[dict] = []  # each actor's .options(), its bundle's included
        self.sub_env_sizes: list[Sequence[int]] = []  # each worker's rows per sub-env
        # the request in flight: the actors asked, with the positions of their indices
        self.asked: list[tuple[RayHandle, list[int]]] = []
        try:
            self.placement_group, strategies = place(ray, options, len(worker_bounds))
            self.actor_class = actor_class = _remote_worker_class(ray)
            actor_options = {"num_cpus": 1, **(options.actor_options or {})}
            for w, (start, stop) in enumerate(worker_bounds):
                self.actor_options.append({**actor_options, **strategies[w]})
                actor = actor_class.options(**self.actor_options[w]).remote(w)
                self.handles.append(RayHandle(w, start, stop, actor))
            if shared is not None and sub_env_sizes is None:
                sub_env_sizes = [[1] * len(fns) for fns in worker_env_fns]
            self.sub_env_sizes = list(sub_env_sizes or [])
            self._start(worker_env_fns, sub_env_sizes)
            if shared is not None:
                for handle in self.handles:
                    handle.lay_out(shared)
        except BaseException:
            self.close()
            raise

    def sub_env_summaries(self) -> list[SubEnvSummary]:
        return [summary for handle in self.handles for summary in handle.summaries]

    def attach(self, shared: SharedMemory, layout: WorkerLayout) -> None:
        """Send each actor its rows and the layout; each lays its share out."""
        try:
            refs = []
            for handle in self.handles:
                handle.start, handle.stop = layout.worker_rows[handle.index]
                rows = layout.sub_env_sizes_of(handle.index)
                refs.append(handle.actor.attach.remote(shared.layout, rows))
            self._started(refs, "take its rows")
            for handle in self.handles:
                handle.lay_out(shared)
        except BaseException:
            self.close()
            raise
        self.shared = shared
        self.bounds = list(layout.worker_rows)
        self.sub_env_sizes = [layout.sub_env_sizes_of(h.index) for h in self.handles]

    def _start(
        self,
        worker_env_fns: list[list[Callable[[], Any]]],
        rows: Sequence[Sequence[int]] | None,
    ) -> None:
        """Start each actor's share; without ``rows`` (nor buffers), in two phases."""
        specs = env_specs_payload()
        refs = []
        for handle, fns in zip(self.handles, worker_env_fns):
            sizes = None if rows is None else rows[handle.index]
            spec = worker_spec(self.options, self.shared, handle.index, fns, sizes, specs)
            refs.append(handle.actor.start.remote(spec))
        self._started(refs, "start")

    def _started(self, refs: list, what: str, handles: list[RayHandle] | None = None) -> None:
        """Read each actor's answer to a start (``what``) into its handle (of ``handles``,
        default all): its node and summaries, or the error that stops the start."""
        ray, options = self.ray, self.options
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=options.startup_timeout)
        ready = set(ready)
        for handle, ref in zip(self.handles if handles is None else handles, refs):
            if ref not in ready:
                raise WorkerError(
                    f"{handle.where()} did not {what} within {options.startup_timeout} s",
                    worker_index=handle.index,
                )
            try:
                kind, detail, *node = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise handle.died(exc) from None
            if kind == "mismatch":
                message, space = detail
                raise SpaceMismatchError(f"worker {handle.index}: {message}", kind=space)
            if kind == "error":
                raise handle.raised(detail, what="create_env_fn")
            handle.node_id = node[0]
            handle.summaries = cloudpickle.loads(detail)[1]

    @property
    def node_ids(self) -> list[str]:
        """The Ray node id of each worker's actor, in worker order."""
        return [handle.node_id for handle in self.handles]

    def summaries(self) -> list[SubEnvSummary]:
        return [summary for handle in self.handles for summary in handle.summaries]

    # ---- commands -----------------------------------------------------------------------------
    def send(self, call: Command) -> None:
        """One remote call per actor; reset options and object actions (each actor's rows)
        travel cloudpickled with it, all pickled before any call is made."""
        if self.owed:
            void_owed_faults(self.owed, call)
        options, objects = call.options, call.action_objects
        payloads: list[bytes | None] = [None] * len(self.handles)
        if options is not None or objects:
            for k, handle in enumerate(self.handles):
                rows = None
                if objects:
                    rows = {key: v[handle.start : handle.stop] for key, v in objects.items()}
                payloads[k] = cloudpickle.dumps((options, rows))
        # "next" in the buffers is stale after a command into a lane: a command into "next"'s
        # own buffer then has it all shipped back
        ship_next = self.last_lane != 0 and call.lane == 0
        self.last_lane = call.lane
        for handle, payload in zip(self.handles, payloads):
            handle.ref = handle.post(payload, ship_next)

    def wait(
        self, call: Command, timeout: float | None = None, meanwhile: Meanwhile | None = None
    ) -> dict[int, Extras]:
        """Collect every actor's answer into the buffers (nothing runs in this process, so
        nothing calls ``meanwhile``)."""
        handles = [handle for handle in self.handles if handle.ref is not None]
        replies = self._gather(handles, timeout, call.kind)
        extras: dict[int, Extras] = {}
        error = None
        respawner = self.respawner
        if respawner is not None:
            extras.update(respawner.take_owed())
        for handle, reply in zip(handles, replies):
            if isinstance(reply, WorkerError) and respawner is not None:
                extras.update(respawner.respawn(handle, "death", str(reply)))
            elif isinstance(reply, WorkerError):
                error = error or reply
            elif type(reply) is tuple and reply[0] == "error":
                error = error or handle.raised(reply[1])
            else:
                handle.receive(reply, call.lane, extras)
        if error is not None:
            raise error
        return extras

    def _gather(self, handles: list[RayHandle], timeout: float | None, what: str) -> list:
        """The answers of ``handles``' calls in flight, a WorkerError for each dead actor;
        past ``timeout``, a TimeoutError (the calls stay in flight)."""
        ray = self.ray
        refs = [handle.ref for handle in handles]
        if timeout is not None:
            _, busy = ray.wait(refs, num_returns=len(refs), timeout=max(timeout, 0.0))
            if busy:
                waiting = [h for h in handles if h.ref in set(busy)]
                rows = [i for h in waiting for i in range(h.start, h.stop)]
                raise SubEnvTimeoutError(
                    f"{what} outlasted the timeout of {timeout} s: workers "
                    f"{[h.index for h in waiting]} (sub-envs {rows}) are still busy",
                    [(h.index, None, list(range(h.start, h.stop))) for h in waiting],
                )
        try:
            replies = ray.get(refs)
        except ray.exceptions.RayError:  # some actor is gone: each answer on its own
            replies = []
            for handle in handles:
                try:
                    replies.append(ray.get(handle.ref))
                except ray.exceptions.RayError as exc:
                    replies.append(handle.died(exc))
        for handle in handles:
            handle.ref = None
        return replies

    def drain(self, call: Call, timeout: float | None = None) -> None:
        """Wait the calls in flight out and drop their answers; a dead actor raises."""
        handles = [handle for handle in self.handles if handle.ref is not None]
        self.last_lane = -1  # whatever the dropped command wrote, "next" is shipped again
        for reply in self._gather(handles, timeout, "the interrupted call"):
            if isinstance(reply, WorkerError):
                raise reply

    def heal_deaths(self, env_fns_of: Callable[[int], list]) -> bool:
        """From now on an actor that dies in a whole-batch command, or outlasts the engine's
        timeout (:meth:`end_busy`), starts again (see ``respawn.py``)."""
        self.respawner = RayRespawner(self, env_fns_of)
        return True

    def end_busy(self, timeout: float) -> bool:  # (see RayRespawner.end_busy)
        return expect_set(self.respawner, "a respawner (heal_deaths)").end_busy(timeout)

    # ---- first-ready commands: one call per actor with the rows sent to it ------------------
    def send_some(self, rows: Sequence[int]) -> None:
        """One remote call per actor that holds some of ``rows``, carrying those rows'
        commands (an actor runs its calls in the order they came, one at a time)."""
        layout = expect_set(self.shared, "the buffers (attach() hands them over)").layout
        if layout.object_obs_keys or layout.object_action_keys:
            raise first_ready_objects_error()
        if self.owed:
            owed = [row for row in rows if row in self.owed]
            self.finished.update((row, self.owed.pop(row)) for row in owed)
            rows = [row for row in rows if row not in owed]
        ship_next = self.last_lane != 0  # see send()
        self.last_lane = 0
        for group, positions in group_indices(rows, self.bounds):
            handle = self.handles[group]
            share = [rows[p] for p in positions]
            if not handle.queue:
                handle.since = time.monotonic()
            handle.queue.append((handle.post(None, ship_next, share), share))

    def resend_some(self, rows: Sequence[int]) -> None:
        """The rows of an interrupted :meth:`send_some` that no queued call carries go now."""
        queued = {row for handle in self.handles for _, share in handle.queue for row in share}
        missing = [row for row in rows if row not in queued and row not in self.finished]
        if missing:
            self.send_some(missing)

    def wait_some(self, take: Take) -> dict[int, Extras | None]:
        """Wait (``ray.wait`` over the actors' pending calls) until ``min_get`` of ``rows``
        have finished; returns those finished (at most ``max_get``, first finished first).
        An actor whose oldest call has run past ``take.row_limit`` while others finish is
        hung: where hangs heal it starts again (its rows in flight faults of kind
        "timeout"), otherwise a SubEnvTimeoutError names it."""
        rows, min_get, max_get, timeout, row_limit = take
        ray = self.ray
        deadline = None if timeout is None else time.monotonic() + timeout
        finished = self.finished
        while sum(row in finished for row in rows) < min_get:
            refs = [ref for handle in self.handles for ref, _ in handle.queue]
            now = time.monotonic()
            due = [deadline] if deadline is not None else []
            if row_limit is not None:  # (woken when the oldest call would be late)
                due += [h.since + row_limit for h in self.handles if h.queue]
            left = max(min(due) - now, 0.0) if due else None
            ready, _ = ray.wait(refs, num_returns=1, timeout=left)
            if ready:
                self._take_ready(refs)
            elif deadline is not None and time.monotonic() >= deadline:
                raise first_ready_timeout(
                    f"fewer than {min_get} sub-envs finished within {timeout} s",
                    [h for h in self.handles if h.queue],
                )
            if row_limit is not None:
                self._end_late(row_limit)
        return take_finished(finished, rows, max_get)

    def _end_late(self, limit: float) -> None:
        """The actors whose oldest first-ready call has run past ``limit`` seconds: started
        again where hangs heal, else a SubEnvTimeoutError."""
        since = time.monotonic() - limit
        late = [h for h in self.handles if h.queue and h.since < since]
        if not late:
            return
        heads = [h.queue[0][0] for h in late]
        ready = set(self.ray.wait(heads, num_returns=len(heads), timeout=0)[0])
        late = [h for h in late if h.queue[0][0] not in ready]  # (one may have answered now)
        if late and self.respawner is None:
            raise first_ready_timeout(f"a sub-env ran past the timeout of {limit} s", late)
        for handle in late:
            self.respawner.start_again_some(handle, "timeout", f"timed out after {limit} s")

    def _take_ready(self, refs: list) -> None:
        """Copy the answers of every first-ready call that is done into the buffers, each
        actor's in the order its calls were made (a later answer holds the newer rows);
        raises the first error after all of them are in. A dead actor, where deaths heal,
        starts again: its rows in flight finish as faults (``RayRespawner.start_again_some``)."""
        ray, respawner = self.ray, self.respawner
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        error = None
        for handle in list(self.handles):  # (a handle started again is replaced in the list)
            queue = handle.queue
            while queue and queue[0][0] in ready:
                ref, share = queue[0]
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the actor is gone: so are its rows
                    if respawner is not None:
                        respawner.start_again_some(handle, "death", str(handle.died(exc)))
                        break
                    error = error or handle.died(exc)
                    self._lost += [row for _, rows in queue for row in rows]
                    queue.clear()
                    break
                queue.popleft()
                handle.since = time.monotonic()
                if type(reply) is tuple and reply[0] == "error":
                    error = error or handle.raised(reply[1])
                    self._lost += share
                    continue
                extras: dict[int, Extras] = {}
                handle.receive(reply, 0, extras)
                for row in share:
                    self.finished[row] = extras.get(row)
                for row, extra in extras.items():  # a process of the actor started again
                    if extra.fault is not None and row not in share:
                        self.owed[row] = extra
        if error is not None:
            raise error

    def take_lost(self) -> list[int]:
        lost, self._lost = self._lost, []
        return lost

    # ---- requests -----------------------------------------------------------------------------
    def request_send(self, call: Request) -> None:
        """One remote call per actor that holds some of ``call.indices`` (in its own rows)."""
        asked = []
        for group, positions in group_indices(call.indices, self.bounds):
            handle = self.handles[group]
            local = [call.indices[p] - handle.start for p in positions]
            kwargs = request_kwargs(call, positions)
            asked.append((handle, positions, pickling.dumps((call.name, local, kwargs))))
        self.asked = [(handle, positions) for handle, positions, _ in asked]
        for handle, _, payload in asked:
            handle.ref = handle.actor.request.remote(payload)

    def request_wait(self, call: Request, timeout: float | None = None) -> list:
        results: list[Any] = [None] * len(call.indices)
        replies = self._gather(
            [handle for handle, _ in self.asked], timeout, f"request {call.name!r}"
        )
        error = None
        for (handle, positions), reply in zip(self.asked, replies):
            if isinstance(reply, WorkerError):
                error = error or reply
            elif reply[0] == "raise":  # the sub-env's own exception, with the traceback
                error = error or handle.raised(reply[1])
            else:
                for p, answer in zip(positions, reply[1]):
                    results[p] = answer
        if error is not None:
            raise error
        return results

    # ---- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the sub-envs, kill the actors and remove the placement group, also after a
        fault; a sub-env's close error is raised after the rest is done."""
        ray = self.ray
        handles, self.handles = self.handles, []
        self.finished.clear()
        error = None
        if ray.is_initialized():
            closing = [(handle, handle.actor.close.remote()) for handle in handles]
            deadline = time.monotonic() + CLOSE_TIMEOUT_S
            for handle, ref in closing:
                try:
                    reply = ray.get(ref, timeout=max(deadline - time.monotonic(), 0.1))
                except ray.exceptions.RayError:  # dead already, or stuck: killed below
                    reply = None
                if reply is not None and error is None:
                    error = handle.raised(reply[1], what="close()")
            for handle in handles:
                try:
                    ray.kill(handle.actor, no_restart=True)
                except Exception:  # gone with its node
                    pass
            if self.placement_group is not None:
                from ray.util.placement_group import remove_placement_group

                try:
                    remove_placement_group(self.placement_group)
                except Exception:
                    pass
        self.placement_group = None
        if error is not None:
            raise error


def place(ray: Any, options: RayOptions, num_workers: int) -> tuple[Any, list[dict]]:
    """The placement group of ``num_workers`` actors (None: no placement) and the scheduling
    options of each actor: a bundle of the group each."""
    strategy = PLACEMENTS[options.placement]
    if strategy is None:
        return None, [{}] * num_workers
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor_options = options.actor_options or {}
    bundle = {"CPU": actor_options.get("num_cpus", 1)}
    if actor_options.get("num_gpus"):
        bundle["GPU"] = actor_options["num_gpus"]
    bundle.update(actor_options.get("resources") or {})
    bundle = {name: amount for name, amount in bundle.items() if amount}
    total = ray.cluster_resources()
    wanted = {name: amount * num_workers for name, amount in bundle.items()}
    short = {name: amount for name, amount in wanted.items() if total.get(name, 0) < amount}
    if short:  # an autoscaler may still add nodes: say so, and wait startup_timeout
        warnings.warn(
            f"RayEnv: {num_workers} actors of {bundle} need {wanted}, the Ray cluster has "
            f"{ {name: total.get(name, 0) for name in wanted} } now; waiting up to "
            f"{options.startup_timeout} s (set actor_options={{'num_cpus': ...}})",
            stacklevel=4,
        )
    group = placement_group([bundle] * num_workers, strategy=strategy)
    try:
        ray.get(group.ready(), timeout=options.startup_timeout)
    except ray.exceptions.GetTimeoutError:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(group)  # (its bundles would wait for a node forever)
        raise WorkerError(
            f"RayEnv: the placement group of {num_workers} bundles {bundle} "
            f"({strategy}) was not placed within {options.startup_timeout} s; the "
            f"cluster has {total}"
        ) from None
    return group, [
        {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=w
            )
        }
        for w in range(num_workers)
    ]


def first_ready_timeout(what: str, handles: list[RayHandle]) -> SubEnvTimeoutError:
    """A first-ready wait's TimeoutError: ``handles``' rows in flight still running."""
    busy = [sorted(r for _, rows in h.queue for r in rows) for h in handles]
    return SubEnvTimeoutError(
        f"first-ready wait: {what}; sub-envs {sorted(r for b in busy for r in b)} "
        f"(workers {[h.index for h in handles]}) are still running",
        [(h.index, None, rows) for h, rows in zip(handles, busy)],
    )


def ray_backend(options: RayOptions) -> Any:
    """Sub-envs on Ray actors (see :class:`RayExecutor`); buffers in this process's memory."""
    from gymvec.backends.backend import Backend, ExecutorStart

    def start(plan: ExecutorStart) -> Executor:
        return RayExecutor(
            plan.worker_env_fns, plan.bounds, plan.shared, options, plan.sub_env_sizes
        )

    return Backend("ray", private_memory, start, collect_on_exit=True)
