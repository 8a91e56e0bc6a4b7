"""The records of a call (a command or a request).

A :class:`Command` (step or reset of every sub-env) and a :class:`Request` (attribute access
and method calls by name) are what the engine hands its executor; each also records how far
the executor's wait got, so that a wait cut short by a ``TimeoutError`` resumes where it
stopped and an interrupted one is drained before the next call (the engine's
``engine.life.CallLife`` decides what ends a call). :class:`Received` and :class:`Ready` are
what a whole-batch and a first-ready receive return beside the buffers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Union

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
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
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
