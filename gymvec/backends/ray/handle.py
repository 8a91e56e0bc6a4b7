"""The driver's end of one ``RayEnv`` actor (see ``executor.py``): its rows, a staging copy of
their part of the buffers, and what one command's answer writes back into them."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from gymvec.backends.executor import SharedMemory
from gymvec.backends.ray.worker import SHIP_NEXT, SHIP_ROOT, ShareLayout
from gymvec.errors import ErrorDetail, WorkerError, sub_env_error
from gymvec.subenvs.group import SubEnvSummary
from gymvec.wire.buffers import Buffers, private_memory
from gymvec.wire.commands import Control, Extras


class RayHandle:
    """The driver's end of one actor: its rows, a staging copy of their part of the buffers
    (what travels is cut from it), and the call in flight (``ref``)."""

    def __init__(self, index: int, start: int, stop: int, actor: Any):
        self.index, self.start, self.stop = index, start, stop
        self.actor = actor
        self.node_id = "?"
        self.ref: Any = None  # the pending result of the call in flight
        self.queue: deque[tuple[Any, list[int]]] = deque()  # first-ready calls, in order
        # when the oldest of them started counting against a timeout: its send, or the
        # actor's last answer, whichever came later (an actor runs its calls one at a time)
        self.since = 0.0
        self.summaries: list[SubEnvSummary] = []

    def lay_out(self, shared: SharedMemory) -> None:
        """The staging copy of the actor's rows ``[start, stop)`` of ``shared``."""
        start, stop = self.start, self.stop
        share = ShareLayout(shared.layout, stop - start)
        self.share = share
        memory = private_memory(share.layout.nbytes)
        self.staging = Buffers(share.layout, memory)
        self.flat = np.frombuffer(memory, dtype=np.uint8, count=share.layout.nbytes)
        self.control_nbytes = Control.nbytes(stop - start)
        control_memory = private_memory(self.control_nbytes)
        self.control = Control(stop - start, control_memory)
        self.control_flat = np.frombuffer(control_memory, dtype=np.uint8)
        action_nbytes = share.action.stop - share.action.start
        self.outgoing = np.zeros(self.control_nbytes + action_nbytes, dtype=np.uint8)
        rows = slice(start, stop)
        parent = shared.buffers
        self.parent = parent
        self.parent_control = shared.control
        self.action_pairs = [
            (self.staging.views[name], parent.views[name][rows])
            for name in share.slot_names("action")
        ]
        staged = self.staging.views
        root_names = share.slot_names("root")
        self.root_pairs = [(parent.views[name][rows], staged[name]) for name in root_names]
        self._next_pairs: dict[int, list] = {}  # by observation lane

    def next_pairs(self, lane: int) -> list:
        """(buffer rows, staging view) of "next"'s fields; its observations into ``lane``."""
        pairs = self._next_pairs.get(lane)
        if pairs is None:
            rows = slice(self.start, self.stop)
            lane_key = ("next", "obs", self.parent.layout.obs_keys[0]) if lane else None
            pairs = [
                (
                    self.parent.obs_lanes[lane][rows]
                    if name == lane_key
                    else self.parent.views[name][rows],
                    self.staging.views[name],
                )
                for name in self.share.slot_names("next")
            ]
            self._next_pairs[lane] = pairs
        return pairs

    def post(self, payload: bytes | None, ship_next: bool, rows: list[int] | None = None) -> Any:
        """Start the command in the control block on this actor: for all its rows, or (a
        first-ready command) for ``rows`` only, the others doing nothing. Returns the ref."""
        control, start, stop = self.parent_control, self.start, self.stop
        if rows is None:
            self.control.mode[:] = control.mode[start:stop]
            self.control.seed[:] = control.seed[start:stop]
        else:
            local = np.asarray(rows) - start
            self.control.mode[:] = 0
            self.control.mode[local] = control.mode[rows]
            self.control.seed[local] = control.seed[rows]
        for staged, parent_rows in self.action_pairs:
            staged[...] = parent_rows
        outgoing, split = self.outgoing, self.control_nbytes
        outgoing[:split] = self.control_flat
        outgoing[split:] = self.flat[self.share.action]
        # One bytes argument: Ray serialises bytes with msgpack, arrays through pickle
        if payload is None and not ship_next:
            return self.actor.run.remote(outgoing.tobytes())
        return self.actor.run.remote(outgoing.tobytes(), payload, ship_next)

    def receive(self, reply: bytes | tuple, lane: int, extras: dict[int, Extras]) -> None:
        """Copy an answer of ``run`` into the buffers; its extras into ``extras``."""
        share_extras: dict[int, Extras] | None
        if isinstance(reply, bytes):
            parts, share_extras = reply, None
        else:
            _, parts, share_extras = reply
        share, flat = self.share, self.flat
        which, at = parts[0], 1
        if which & SHIP_ROOT:
            size = share.root.stop
            flat[share.root] = np.frombuffer(parts, np.uint8, size, at)
            at += size
            for rows, staged in self.root_pairs:
                rows[...] = staged
        if which & SHIP_NEXT:
            flat[share.next] = np.frombuffer(
                parts, np.uint8, share.next.stop - share.next.start, at
            )
            for rows, staged in self.next_pairs(lane):
                rows[...] = staged
        if share_extras:
            start = self.start
            extras.update({start + i: e for i, e in share_extras.items()})

    def where(self) -> str:
        return f"worker {self.index} (Ray actor on node {self.node_id})"

    def died(self, exc: BaseException) -> WorkerError:
        reason = str(exc).strip().splitlines()
        detail = f": {type(exc).__name__}: {reason[0]}" if reason else f": {type(exc).__name__}"
        return WorkerError(f"{self.where()} died{detail}", worker_index=self.index)

    def raised(self, detail: ErrorDetail, what: str = "") -> WorkerError:
        """The error for what the actor sent when a sub-env raised (see
        ``errors.sub_env_error``); its sub-env index counts from this share's first row."""
        if detail.sub_env is not None:
            detail = detail._replace(sub_env=self.start + detail.sub_env)
        where = f"worker {self.index}, Ray actor on node {self.node_id}"
        return sub_env_error(detail, worker_index=self.index, where=where, what=what)
