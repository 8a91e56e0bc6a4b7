"""Where sub-envs run: the executor contract, and the executor of the calling process.

The engine (``engine.py``) owns the buffers and the control block; an executor owns the
sub-envs and makes them carry out the engine's commands. :class:`LocalExecutor` runs them in
the calling process (``SerialEnv``, and the share a ``ParallelEnv`` keeps for itself);
``processes.ProcessExecutor`` in worker processes over shared memory. A new backend (other
machines, say) is a new :class:`Executor`: the engine and both front ends stay as they are.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gymvec.engine.buffers import BufferLayout, Buffers
from gymvec.engine.commands import Autoreset, Control, Extras
from gymvec.engine.subenvs import SubEnvGroup, SubEnvSummary, close_each, run_request

OnLocalDone = Callable[[int], None]


@dataclasses.dataclass(frozen=True)
class Blocks:
    """The memory a batch's sub-envs work on: the buffers and the control block, as blocks
    (which worker processes map) and as this process's views of them."""

    layout: BufferLayout
    memory: Any
    control_memory: Any
    buffers: Buffers
    control: Control


class Call:
    """The command or request in flight, as the engine and its executor share it.

    The engine fills in what was asked; the executor records how far its wait got, so that a
    wait cut short by a ``TimeoutError`` resumes where it stopped, and an interrupted one is
    drained before the next call. (A plain class with slots: one is made every step.)
    """

    __slots__ = (
        "kind",
        "autoreset",
        "current_root",
        "into",
        "options",
        "mask",
        "action_objects",
        "lane",
        "name",
        "indices",
        "kwargs",
        "values",
        "interrupted",
        "extras",
        "local_error",
        "results",
        "plan",
    )

    def __init__(
        self,
        kind: str,
        autoreset: Autoreset = Autoreset.NONE,
        current_root: bool = False,
        *,
        into: str = "root",
        options: dict | None = None,
        mask: np.ndarray | None = None,
        name: str = "",
        indices: list[int] | None = None,
        kwargs: dict | None = None,
        values: Sequence | None = None,
    ):
        self.kind = kind  # "step", "reset" or "request"
        self.autoreset = autoreset  # a step's policy for finished sub-envs
        self.current_root = current_root  # a step also brings every root up to date
        self.into = into  # where a reset writes: "root" or "next"
        self.options = options  # the reset options of a command
        self.mask = mask  # the sub-envs a reset resets (None: all of them)
        self.action_objects: dict[tuple, list] | None = None  # all sub-envs' (see Buffers)
        self.lane = 0  # the observation lane "next"'s observations go to (0: none)
        # a request: its name, the sub-envs it goes to, keyword arguments, per-index values
        self.name = name
        self.indices = indices or []
        self.kwargs = kwargs or {}
        self.values = values
        # progress of the executor's wait
        self.interrupted = False  # a wait was interrupted: its answers are to be dropped
        self.extras: dict[int, Extras] | None = None  # answers so far (None: local share due)
        self.local_error: Exception | None = None  # what this process's share raised
        self.results: list | None = None  # a request's results so far
        self.plan: Any = None  # the executor's own record of where a request went


class Executor(ABC):
    """Runs sub-envs and carries out the engine's commands and requests on them.

    ``bounds[g]`` is the row range ``(start, stop)`` of the sub-envs of group ``g`` (a worker
    process, or the share run in this process); groups cover the rows in order.

    Commands: the engine writes the mode bytes, seeds and lane into the control block and the
    actions into the buffers, then calls :meth:`send`, then :meth:`wait` (which returns once
    every group is done). Requests (attribute access, method calls) go by name with keyword
    arguments, through :meth:`request_send` and :meth:`request_wait`.
    """

    bounds: list[tuple[int, int]]

    @abstractmethod
    def summaries(self) -> list[SubEnvSummary]:
        """A summary of every sub-env, in row order."""

    def local_envs(self) -> list[Any]:
        """The sub-envs that live in this process (none by default)."""
        return []

    @abstractmethod
    def send(self, call: Call) -> None:
        """Start the command of ``call`` on every group; returns at once where it can."""

    @abstractmethod
    def wait(
        self, call: Call, timeout: float | None = None, on_local_done: OnLocalDone | None = None
    ) -> dict[int, Extras]:
        """Wait for the command sent last; returns the extras by sub-env index.

        Raises ``TimeoutError`` past ``timeout`` (calling again resumes the wait), and the
        first error of a sub-env once every group has answered or is gone.
        ``on_local_done(k)``: called once the rows ``[0, k)`` that this process steps are done,
        while other groups still run.
        """

    @abstractmethod
    def drain(self, call: Call, timeout: float | None = None) -> None:
        """End an interrupted call: read the answers still due and drop them."""

    @abstractmethod
    def request_send(self, call: Call) -> None:
        """Start request ``call.name`` on the sub-envs at ``call.indices``."""

    @abstractmethod
    def request_wait(self, call: Call, timeout: float | None = None) -> list:
        """The request's results, one per index; raises the first error once every group
        has answered."""

    @abstractmethod
    def close(self) -> None:
        """Close every sub-env and stop whatever runs them; raises a sub-env's close error
        after the rest is closed."""


def group_indices(indices: Sequence[int], bounds: Sequence[tuple[int, int]]) -> list:
    """Split ``indices`` by group: ``[(group, [positions in indices])]``, groups in order."""
    by_group: dict[int, list[int]] = {}
    for position, index in enumerate(indices):
        for group, (start, stop) in enumerate(bounds):
            if start <= index < stop:
                by_group.setdefault(group, []).append(position)
                break
    return sorted(by_group.items())


def request_kwargs(call: Call, positions: list[int]) -> dict:
    """The keyword arguments of a request for the indices at ``positions`` (per-index
    ``values`` split accordingly)."""
    if call.values is None:
        return call.kwargs
    return {**call.kwargs, "values": [call.values[p] for p in positions]}


class LocalExecutor(Executor):
    """Runs groups of sub-envs in the calling process (SerialEnv, and ParallelEnv's own share)."""

    def __init__(self, groups: list[SubEnvGroup]):
        self.groups = groups
        self.bounds = [(g.start, g.stop) for g in groups]

    @classmethod
    def build(
        cls, env_fns_per_group: list[list], starts: list[int], blocks: Blocks
    ) -> LocalExecutor:
        groups: list[SubEnvGroup] = []
        try:
            for fns, start in zip(env_fns_per_group, starts):
                groups.append(SubEnvGroup(fns, start, blocks.buffers, blocks.control))
        except BaseException:
            close_each(groups)
            raise
        return cls(groups)

    def summaries(self) -> list[SubEnvSummary]:
        return [summary for group in self.groups for summary in group.summaries()]

    def local_envs(self) -> list[Any]:
        return [env for group in self.groups for env in group.envs]

    def send(self, call: Call) -> None:
        pass  # everything runs in wait(); object actions are already in this process's lists

    def wait(
        self, call: Call, timeout: float | None = None, on_local_done: OnLocalDone | None = None
    ) -> dict[int, Extras]:
        # Nothing runs elsewhere, so ``on_local_done`` has nothing to overlap with, and
        # nothing could cut a sub-env short at ``timeout``.
        extras: dict[int, Extras] = {}
        for group in self.groups:
            extras.update(group.run(call.options))
        return extras

    def drain(self, call: Call, timeout: float | None = None) -> None:
        pass  # nothing runs elsewhere: nothing is left to wait for

    def request_send(self, call: Call) -> None:
        pass  # runs in request_wait()

    def request_wait(self, call: Call, timeout: float | None = None) -> list:
        results: list[Any] = [None] * len(call.indices)
        for group, positions in group_indices(call.indices, self.bounds):
            sub_indices = [call.indices[p] for p in positions]
            kwargs = request_kwargs(call, positions)
            answers = run_request(self.groups[group], call.name, sub_indices, kwargs)
            for p, answer in zip(positions, answers):
                results[p] = answer
        return results

    def close(self) -> None:
        groups, self.groups = self.groups, []
        close_each(groups)
