"""The messages of a call (a command or a request), and what its receive returns.

A :class:`Command` (step or reset of every sub-env) and a :class:`Request` (attribute access
and method calls by name) are what the engine hands its executor: messages, never written
once made. Whatever an executor keeps of a call while it waits (answers so far, its local
share's error, where a request went) is its own; the engine's ``life.CallLife`` holds the
call in flight and decides what ends it. :class:`Received` and :class:`Ready` are what a
whole-batch and a first-ready receive return beside the buffers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar, Literal, NamedTuple, Union

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.wire.commands import Extras

Into = Literal["root", "next"]  # where a reset writes: the root, or "next" as a transition
InfoPlaces = dict  # learnt info fields: {name: (InfoField, offset)} (see BufferLayout)


class Received(NamedTuple):
    """What ``BatchEngine.recv`` returns beside the buffers.

    ``kind``: the command it ends, "step" or "reset"; ``mask``: the sub-envs a reset reset
    (None: all). ``extras``: by sub-env index, what each reported that has no place in the
    buffers. ``observations``: the handed-out observation lane that holds "next"'s
    observations (an array nobody else refers to, see ``Buffers.handed_out_lanes``), or None
    when they are in ``buffers.next`` itself. ``faults`` (only with ``on_fault`` restarting,
    else None): by row, the message of a fault healed in this call (API section 13), the
    string ``infos["fault"]`` shows; those rows read as truncated (reward 0, terminated
    False, truncated True) and their observation is the row's last one, which the front end
    keeps (the buffers' row is not to be read).
    """

    kind: str
    mask: np.ndarray | None
    extras: dict[int, Extras]
    observations: np.ndarray | None
    faults: dict[int, str] | None = None


class Take(NamedTuple):
    """What a first-ready receive asks of its executor (``Executor.wait_some``): at least
    ``min_get`` of ``rows`` (each in flight), at most ``max_get`` (None: all that finished),
    within ``timeout`` seconds (None: as long as it takes). ``row_limit``: the engine's own
    timeout, past which one row in flight is hung however many others finish (None: none)."""

    rows: Sequence[int]
    min_get: int
    max_get: int | None = None
    timeout: float | None = None
    row_limit: float | None = None


class Ready(NamedTuple):
    """What ``BatchEngine.async_recv`` returns beside the buffers.

    ``indices``: the sub-envs whose first-ready command finished (int64, first finished
    first); their results are in their rows of the buffers until they are sent another
    command. ``extras``: by sub-env index, what each reported that has no place in the buffers.
    ``faults``: as ``Received.faults``, for the steps among them (a reset that faulted is
    sent again on the rebuilt sub-env and comes back later).
    """

    indices: np.ndarray
    extras: dict[int, Extras]
    faults: dict[int, str] | None = None


@dataclasses.dataclass(frozen=True, slots=True, eq=False)  # (eq: by identity)
class Command:
    """A step or reset of every sub-env (the engine makes a step's once per autoreset mode and
    lane, and sends it again: see ``BatchEngine.step_send``).

    ``autoreset``: a step's policy for finished sub-envs; ``into``: where a reset writes;
    ``options``: the reset options; ``mask``: the sub-envs a reset resets (None: all of
    them); ``action_objects``: every sub-env's object actions (see ``Buffers``), or None;
    ``lane``: the observation lane "next"'s observations go to (0: none).
    """

    kind: Literal["step", "reset"]
    autoreset: AutoresetMode = AutoresetMode.DISABLED
    into: Into = "root"
    options: dict | None = None
    mask: np.ndarray | None = None
    action_objects: dict[tuple, list] | None = None
    lane: int = 0


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Request:
    """A request by name to some sub-envs (``subenvs.REQUESTS``): ``indices``, the sub-envs it
    goes to; ``values``, one value per index (set_attr, load_state_dict), or None."""

    name: str
    indices: list[int]
    kwargs: dict
    values: Sequence | None = None
    kind: ClassVar[str] = "request"


Call = Union[Command, Request]  # noqa: UP007 (a runtime alias, also for isinstance readers)
