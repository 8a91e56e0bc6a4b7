"""Where sub-envs run: the executor contract every backend fulfils, and its helpers.

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

from gymvec.errors import UnsupportedSpaceError
from gymvec.subenvs.group import SubEnvSummary
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire.buffers import BufferLayout, Buffers
from gymvec.wire.calls import Call, Command, Request, Take
from gymvec.wire.commands import Control, Extras

Meanwhile = Callable[[int], object]  # see Executor.wait


@dataclasses.dataclass(frozen=True)
class SharedMemory:
    """The memory a batch's sub-envs work on: the buffers and the control block, as memory
    (which worker processes map) and as this process's views of them."""

    layout: BufferLayout
    memory: Any
    control_memory: Any
    buffers: Buffers
    control: Control


class Executor(ABC):
    """Runs sub-envs and carries out the engine's commands and requests on them.

    ``bounds[g]`` is the row range ``(start, stop)`` of the sub-envs of group ``g`` (a worker
    process, or the share run in this process); groups cover the rows in order.

    Commands: the engine writes the mode bytes, seeds and lane into the control block and the
    actions into the buffers, then calls :meth:`send`, then :meth:`wait` (which returns once
    every group is done). Requests (attribute access, method calls) go by name with keyword
    arguments, through :meth:`request_send` and :meth:`request_wait`. The calls
    (``wire.calls``) are messages: what an executor keeps of one while it waits (answers so
    far, where it went) it keeps itself.

    First-ready commands (``BatchEngine.async_step_send`` and the like) go to single sub-envs
    instead of every group: the engine writes the mode bytes (and seeds) of rows that are
    not in flight, then calls :meth:`send_some` with them; :meth:`wait_some` returns the rows
    that have finished, as soon as enough have. The contract a backend keeps:

    * each group runs its rows one at a time, in the order they were sent (across calls);
    * a row is finished as soon as its own command is, whatever the other rows of its group
      are doing, and its results are then in the buffers (rows never share memory). Except
      on Ray: ``RayExecutor`` answers per remote call, so the rows that one ``send_some``
      gives an actor come back together (send a slow row on its own to keep it apart);
    * nothing is lost: a finished row that a wait did not return (``max_get``, a timeout, an
      error of another row) comes back from a later wait;
    * rows that an error took out of flight (their sub-env raised, their worker died, an
      interrupt hit them while this process ran them) are handed to the engine once through
      :meth:`take_lost`; their sub-envs' states are unknown;
    * a plain command (:meth:`send`) or request only comes once no row is in flight.

    An executor without first-ready commands keeps the defaults, which raise.
    """

    bounds: list[tuple[int, int]]

    @abstractmethod
    def summaries(self) -> list[SubEnvSummary]:
        """A summary of every sub-env, in row order."""

    # An executor started without its buffers (``ExecutorStart.unplanned``: a start in two
    # phases) has built its sub-envs; it runs nothing until ``attach``.
    def sub_env_summaries(self) -> list[SubEnvSummary]:
        """One summary per sub-env (not per row), with the info fields it declares: what the
        engine lays the buffers out from."""
        raise NotImplementedError(f"{type(self).__name__} starts with its buffers only")

    def attach(self, shared: SharedMemory, layout: WorkerLayout) -> None:
        """The second phase: each group takes its rows (``layout``) of ``shared``."""
        raise NotImplementedError(f"{type(self).__name__} starts with its buffers only")

    def local_envs(self) -> list[Any]:
        """The sub-envs that live in this process (none by default)."""
        return []

    @abstractmethod
    def send(self, call: Command) -> None:
        """Start the command of ``call`` on every group; returns at once where it can."""

    @abstractmethod
    def wait(
        self, call: Command, timeout: float | None = None, meanwhile: Meanwhile | None = None
    ) -> dict[int, Extras]:
        """Wait for the command sent last; returns the extras by sub-env index.

        Raises ``TimeoutError`` past ``timeout`` (calling again resumes the wait), and the
        first error of a sub-env once every group has answered or is gone. Where this
        process runs a share of the sub-envs while other groups run theirs, it runs it
        once (a resumed wait does not), then calls ``meanwhile(k)``: rows ``[0, k)`` are
        done, the other groups may still be running.
        """

    @abstractmethod
    def drain(self, call: Call, timeout: float | None = None) -> None:
        """End an interrupted call: read the answers still due and drop them."""

    def send_some(self, rows: Sequence[int]) -> None:
        """Start the command in the control block of each sub-env at ``rows`` (none of them
        in flight); each group queues its rows in the order sent. Returns at once where it
        can (this process's rows run in :meth:`wait_some`)."""
        raise NotImplementedError(f"{type(self).__name__} has no first-ready commands")

    def resend_some(self, rows: Sequence[int]) -> None:
        """After an interrupt (Ctrl-C) cut :meth:`send_some` of ``rows`` short: send those that
        did not go out and make sure the others run, so that every one of them is in flight."""
        raise NotImplementedError(f"{type(self).__name__} has no first-ready commands")

    def wait_some(self, take: Take) -> dict[int, Extras | None]:
        """Wait until at least ``take.min_get`` of ``take.rows`` (each in flight) have
        finished; returns the finished ones (at most ``take.max_get``, first finished first)
        with their extras (None: none), and keeps the others for a later wait.

        Raises ``TimeoutError`` past ``take.timeout`` (nothing lost), a sub-env's error (as a
        ``WorkerError`` from a worker process) or a ``WorkerError`` for a dead worker; see
        :meth:`take_lost`.
        """
        raise NotImplementedError(f"{type(self).__name__} has no first-ready commands")

    def take_lost(self) -> list[int]:
        """The rows that errors took out of flight since the last call (see the class)."""
        return []

    def add_info_fields_in_flight(self, places: dict) -> bool:
        """Hand learnt info fields (see ``Buffers.add_info_fields``) to every group while
        first-ready rows may be in flight: each group adopts them before it runs its next
        row (a row already running reports the entries as extras). Returns False where the
        executor cannot (the default): the entries then stay extras."""
        return False

    def heal_deaths(self, env_fns_of: Callable[[int], list]) -> bool:
        """Faults that heal (API section 13): from now on, start a worker that dies in a
        whole-batch command, or outlasts the engine's timeout (:meth:`end_busy`), again,
        with ``env_fns_of(worker)``'s factories; its rows come back as faults
        (``Extras.fault``). Returns False where the executor cannot (the default: its
        sub-envs run in this process, or its backend does not yet)."""
        return False

    def end_busy(self, timeout: float) -> bool:
        """The command in flight outlasted ``timeout``: end the workers still busy with it
        and start them again (only after :meth:`heal_deaths` returned True); False where
        it cannot (the timeout then stands)."""
        raise NotImplementedError(f"{type(self).__name__} cannot end busy workers")

    @abstractmethod
    def request_send(self, call: Request) -> None:
        """Start request ``call.name`` on the sub-envs at ``call.indices``."""

    @abstractmethod
    def request_wait(self, call: Request, timeout: float | None = None) -> list:
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


def first_ready_objects_error(what: str = "observations and actions") -> UnsupportedSpaceError:
    """What a first-ready command of a batch with object leaves raises where they cannot
    travel with it."""
    return UnsupportedSpaceError(
        f"first-ready commands here need {what} of fixed shape: object leaves (spaces "
        "without one) travel with whole-batch commands only"
    )


def group_of(row: int, bounds: Sequence[tuple[int, int]]) -> int:
    """The group that holds sub-env ``row``."""
    for group, (start, stop) in enumerate(bounds):
        if start <= row < stop:
            return group
    raise IndexError(f"sub-env {row} is in no group")


def take_finished(
    finished: dict[int, Extras | None], rows: Sequence[int], max_get: int | None
) -> dict[int, Extras | None]:
    """Take the finished entries of ``rows`` out of ``finished`` (first finished first, at
    most ``max_get``)."""
    wanted = set(rows)
    taken = [row for row in finished if row in wanted]
    if max_get is not None:
        taken = taken[:max_get]
    return {row: finished.pop(row) for row in taken}


def void_owed_faults(owed: dict[int, Extras], call: Command) -> None:
    """A whole-batch reset resets the rebuilt sub-envs of the rows it covers: the faults they
    owe their next first-ready command since a first-ready restart are void."""
    if call.kind == "reset":
        for row in list(owed) if call.mask is None else [r for r in owed if call.mask[r]]:
            del owed[row]


def request_kwargs(call: Request, positions: list[int]) -> dict:
    """The keyword arguments of a request for the indices at ``positions`` (per-index
    ``values`` split accordingly)."""
    if call.values is None:
        return call.kwargs
    return {**call.kwargs, "values": [call.values[p] for p in positions]}
