"""One ``RayEnv`` worker: the sub-envs a Ray actor holds on its node, and what travels per call.

A Ray actor runs a :class:`RayWorker`. It holds its share of the batch (``envs_per_worker``
sub-envs) through the same machinery as ``SerialEnv`` and ``ParallelEnv``: buffers laid out for
its rows alone and an executor over them, a ``LocalExecutor`` (the sub-envs step in the actor's
own process) or, with ``worker_processes > 1``, a ``ProcessExecutor`` whose processes share the
actor's buffers through shared memory on that node.

One command is one actor call. :class:`ShareLayout` says which bytes travel: the caller's
actions and control bytes for these rows go in (two flat arrays, no per-sub-env objects), and
the root and/or ``"next"`` part of the share's block comes back, only what the command wrote,
as flat arrays through Ray's object store. The driver (``executor.py``) copies them into
its own buffers, so the engine above sees the same buffers as with any other executor.

This module imports neither ray nor torch: the actor class is made from :class:`RayWorker` by
``ray.remote`` on the driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import cloudpickle
import numpy as np

from gymvec.backends import pickling
from gymvec.backends.executor import Executor, SharedMemory
from gymvec.backends.local import LocalExecutor
from gymvec.backends.processes.signals import (
    add_missing_env_specs,
    ready_message,
)
from gymvec.common.arrays import any_set
from gymvec.common.structure import OBJECT
from gymvec.errors import ErrorDetail, SpaceMismatchError, error_detail
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire.buffers import (
    SHM_DIRECTORY,
    BufferLayout,
    Buffers,
    MemmapMemory,
    as_buffer,
    private_memory,
)
from gymvec.wire.calls import Command, Request
from gymvec.wire.commands import (
    AUTORESET,
    RESET,
    RESET_INTO_NEXT,
    STEP,
    SYNC_ROOT,
    Control,
)

SHIP_ROOT, SHIP_NEXT = 1, 2  # which parts of the block an answer of RayWorker.run holds


class ShareLayout:
    """The buffers of one worker's rows as a layout of their own, and the byte ranges of a
    command's traffic in it.

    ``BufferLayout`` puts the root's fields first, then ``"next"``'s (reward last), then the
    actions: each part is one contiguous range, so a command ships at most three flat arrays.
    """

    def __init__(self, layout: BufferLayout, num_envs: int):
        fields = layout.fields
        obs = [
            (key, fields[("root", "obs", key)].shape, fields[("root", "obs", key)].dtype)
            for key in layout.obs_keys
        ]
        obs += [(key, (), OBJECT) for key in layout.object_obs_keys]
        actions = [
            (key, fields[("action", key)].shape, fields[("action", key)].dtype)
            for key in layout.action_keys
        ]
        actions += [(key, (), OBJECT) for key in layout.object_action_keys]
        self.layout = BufferLayout(
            num_envs, obs, actions, layout.info_fields, obs_lanes=0, wide_actions=True
        )
        offsets = {name: f.offset for name, f in self.layout.fields.items()}
        nbytes = self.layout.nbytes
        next_start = min(o for name, o in offsets.items() if name[0] == "next")
        action_start = min(
            (o for name, o in offsets.items() if name[0] != "root" and name[0] != "next"),
            default=nbytes,
        )
        self.root = slice(0, next_start)
        self.next = slice(next_start, action_start)
        self.action = slice(action_start, nbytes)

    def slot_names(self, slot: str) -> list[tuple]:
        """The fields of ``slot`` ("root", "next" or "action": with the float64 twins)."""
        if slot == "action":
            return [name for name in self.layout.fields if name[0] not in ("root", "next")]
        return [name for name in self.layout.fields if name[0] == slot]


@dataclasses.dataclass
class WorkerSpec:
    """What an actor builds its share from (picklable; the factories cloudpickled)."""

    index: int
    env_fns_payload: bytes
    parent_layout: BufferLayout | None  # None: a start in two phases (see RayWorker.start)
    worker_processes: int
    start_method: str
    env_specs_payload: bytes | None
    rows: tuple[int, ...]  # the rows of each sub-env (a block fills several; () unknown)


def worker_spec(
    options: Any,
    shared: SharedMemory | None,
    w: int,
    fns: list,
    rows: Sequence[int] | None,
    specs: bytes | None,
) -> WorkerSpec:
    """What actor ``w`` starts from: the factories ``fns``, its rows per sub-env, the
    layout of ``shared`` (None: a start in two phases), ``options`` (the ``RayOptions``)."""
    return WorkerSpec(
        rows=() if rows is None else tuple(rows),
        index=w,
        env_fns_payload=pickling.dumps(fns),
        parent_layout=None if shared is None else shared.layout,
        worker_processes=options.worker_processes,
        start_method=options.start_method,
        env_specs_payload=specs,
    )


def _touched(modes: bytes) -> tuple[Literal["step", "reset"], bool, bool, bool]:
    """What a command is, by its mode bytes ("step" if any sub-env steps, else "reset"; the
    driver sends only the bytes), and which parts of the share's block it writes (the root for
    sure, "next", the root where a sub-env finished: AUTORESET)."""
    kinds = set(modes)
    kind: Literal["step", "reset"] = "step" if any(m & STEP for m in kinds) else "reset"
    root = any(m & SYNC_ROOT or (m & RESET and not m & RESET_INTO_NEXT) for m in kinds)
    next_ = any(m & (STEP | RESET_INTO_NEXT) for m in kinds)
    autoreset = any(m & AUTORESET for m in kinds)
    return kind, root, next_, autoreset


class RayWorker:
    """The state of one ``RayEnv`` worker inside its Ray actor (see the module docstring).

    Every method answers with plain values: errors of the sub-envs come back as their
    traceback text and class name (``("error", ...)``), so the driver raises a
    ``gymvec.WorkerError`` of the sub-env's class, as ``ParallelEnv`` does.
    """

    def __init__(self, index: int):
        self.index = index
        self.processes = 1  # that hold the share's sub-envs (see _build)
        self.executor: Executor | None = None
        self.groups: list[list[Callable[[], Any]]] = []  # the factories of each process
        self.memories: list[Any] = []  # the share's blocks
        self._touch: dict[bytes, tuple[Literal["step", "reset"], bool, bool, bool]] = {}

    # ---- lifetime -----------------------------------------------------------------------------
    def start(self, spec: WorkerSpec) -> tuple:
        """Build the share's sub-envs; ``("ready", summaries payload, node id)`` or why not.
        Without ``spec.parent_layout`` (a start in two phases), ``("built", ...)`` with a
        summary per sub-env: :meth:`attach` lays the share out then."""
        try:
            env_fns = cloudpickle.loads(spec.env_fns_payload)
            if spec.env_specs_payload is not None:
                add_missing_env_specs(cloudpickle.loads(spec.env_specs_payload))
            self.executor = executor = self._build(env_fns, spec.worker_processes, spec)
            if spec.parent_layout is None:
                return ("built", ready_message(executor.sub_env_summaries(), "built"), _node_id())
        except SpaceMismatchError as exc:  # not the worker's fault: raised as it is
            return ("mismatch", (str(exc), exc.kind))
        except BaseException as exc:
            return ("error", error_detail(exc))
        return self.attach(spec.parent_layout, spec.rows)

    def attach(self, parent_layout: BufferLayout, rows: tuple[int, ...]) -> tuple:
        """Lay the share out (``rows``: those of each sub-env) over buffers of its own, and
        hand them to the executor; ``("ready", summaries payload, node id)`` or why not."""
        try:
            executor = self._started()
            share = ShareLayout(parent_layout, sum(rows))
            layout = share.layout
            processes = self.processes
            new_memory = private_memory if processes == 1 else _passable_memory
            memory = new_memory(layout.nbytes)
            control_memory = new_memory(Control.nbytes(sum(rows)))
            buffers = Buffers(layout, memory)
            buffers.ship_objects = True  # object observations go back with each answer
            control = Control(sum(rows), control_memory)
            self.share, self.buffers, self.control = share, buffers, control
            self.flat = np.frombuffer(as_buffer(memory), dtype=np.uint8, count=layout.nbytes)
            self.control_flat = np.frombuffer(
                as_buffer(control_memory), dtype=np.uint8, count=Control.nbytes(sum(rows))
            )
            shared = SharedMemory(layout, memory, control_memory, buffers, control)
            executor.attach(shared, WorkerLayout((len(rows),), rows).split(processes))
            # (a MemmapMemory keeps its file open: a process started again maps it too)
            self.memories = [memory, control_memory]
            ready = ready_message(executor.summaries())
        except SpaceMismatchError as exc:
            return ("mismatch", (str(exc), exc.kind))
        except BaseException as exc:
            return ("error", error_detail(exc))
        return ("ready", ready, _node_id())

    def _build(
        self, env_fns: list[Callable[[], Any]], processes: int, spec: WorkerSpec
    ) -> Executor:
        """The share's sub-envs, built in this process or over ``processes`` (at most one
        per sub-env), waiting for :meth:`attach`."""
        self.processes = processes = min(processes, len(env_fns))
        if processes == 1:
            self.groups = [env_fns]
            return LocalExecutor.build([env_fns], [0], None)
        from gymvec.backends.processes.executor import ProcessExecutor, ProcessOptions

        # the share over its processes, as every layout spreads sub-envs
        split = WorkerLayout.plan(len(env_fns), num_workers=processes)
        options = ProcessOptions(start_method=spec.start_method, local_worker=True)
        self.groups = groups = [env_fns[start:stop] for start, stop in split.worker_sub_envs]
        return ProcessExecutor(groups, list(split.worker_sub_envs), None, options)

    def _started(self) -> Executor:
        """The executor of the share's sub-envs (one not started or closed raises, as the
        call's error)."""
        if self.executor is None:
            raise RuntimeError(f"RayEnv worker {self.index} has no sub-envs (closed)")
        return self.executor

    def close(self) -> tuple | None:
        """Close the sub-envs (and the share's processes); a close error comes back."""
        executor, self.executor = self.executor, None
        if executor is None:
            return None
        try:
            executor.close()
        except BaseException as exc:
            return ("error", error_detail(exc))
        finally:
            for block in self.memories:
                if isinstance(block, MemmapMemory):
                    block.release()
        return None

    # ---- commands -----------------------------------------------------------------------------
    def run(self, packed: bytes, payload: bytes | None = None, ship_next: bool = False) -> Any:
        """Carry out one command. In: the caller's control bytes of these rows, then their
        actions (``ShareLayout.action``), as one bytes object; ``payload``: the reset options
        and object actions, cloudpickled (None: neither); ``ship_next``: send "next" back even
        if the command does not write it (the caller's copy of it is stale).

        Out: the parts of the block the command wrote, as bytes (a byte of ``SHIP_ROOT`` and
        ``SHIP_NEXT`` bits, then the root's part, then "next"'s); with extras,
        ``("ok", those bytes, extras)``; ``("error", detail)`` if a sub-env raised.
        """
        share = self.share
        split = len(self.control_flat)
        self.control_flat[:] = np.frombuffer(packed, np.uint8, split)
        self.flat[share.action] = np.frombuffer(packed, np.uint8, offset=split)
        modes = self.control.mode.tobytes()
        touched = self._touch.get(modes)
        if touched is None:
            touched = self._touch.setdefault(modes, _touched(modes))
        kind, root, next_, autoreset = touched
        options = action_objects = None
        if payload is not None:
            options, objects = cloudpickle.loads(payload)
            if objects:
                for key, values in objects.items():
                    self.buffers.action_objects[key][:] = values
                action_objects = self.buffers.action_objects
        call = Command(kind, options=options, action_objects=action_objects)
        try:
            executor = self._started()
            executor.send(call)
            extras = executor.wait(call)
        except BaseException as exc:
            return ("error", error_detail(exc))
        if autoreset and not root:
            root = any_set(self.buffers.next.done)
        next_ = next_ or ship_next
        flat = self.flat
        parts = [bytes([SHIP_ROOT * root | SHIP_NEXT * next_])]
        if root:
            parts.append(flat[share.root].tobytes())
        if next_:
            parts.append(flat[share.next].tobytes())
        shipped = b"".join(parts)
        return ("ok", shipped, extras) if extras else shipped

    # ---- requests -----------------------------------------------------------------------------
    def request(
        self, payload: bytes
    ) -> tuple[Literal["ok"], list] | tuple[Literal["raise"], ErrorDetail]:
        """Answer a request for rows of this share: ``("ok", results)`` or
        ``("raise", detail)``, the ``ErrorDetail`` of the caller's error (a missing attribute,
        say), raised on the driver as the sub-env's own exception. ``heal_faults`` also
        has the share's own executor start its dead processes again (``heal_deaths``: with
        ``worker_processes > 1``, a process beside the actor that dies is replaced here, its
        rows faulted, the actor staying)."""
        name, indices, kwargs = cloudpickle.loads(payload)
        values = kwargs.pop("values", None)
        call = Request(name, indices, kwargs, values)
        try:
            executor = self._started()
            executor.request_send(call)
            results = executor.request_wait(call)
            if name == "heal_faults":
                executor.heal_deaths(self.groups.__getitem__)
            return ("ok", results)
        except Exception as exc:
            return ("raise", error_detail(exc))

    def ping(self) -> str:
        """The node id (an answer at all says the actor is alive)."""
        return _node_id()


def _passable_memory(nbytes: int) -> MemmapMemory:
    """A block the share's processes, running already, can map (see ``MemmapMemory``)."""
    return MemmapMemory(nbytes, None, SHM_DIRECTORY)


def _node_id() -> str:
    import ray  # inside the actor: ray is there

    return ray.get_runtime_context().get_node_id()
