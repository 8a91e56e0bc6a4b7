"""The executor of the calling process: sub-env groups run here, in order (``SerialEnv``, and the
share a ``ParallelEnv`` keeps for itself)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from gymvec.backends.executor import (
    Executor,
    Meanwhile,
    SharedMemory,
    group_indices,
    group_of,
    request_kwargs,
    take_finished,
)
from gymvec.subenvs.group import SubEnvGroup, SubEnvSummary, close_each, run_request
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire.calls import Call, Command, Request, Take
from gymvec.wire.commands import Extras


class LocalExecutor(Executor):
    """Runs groups of sub-envs in the calling process (SerialEnv, and ParallelEnv's own share)."""

    def __init__(self, groups: list[SubEnvGroup]):
        self.groups = groups
        self.bounds = [(g.start, g.stop) for g in groups]
        self.queue: deque[int] = deque()  # first-ready rows sent, to run in this order
        self.finished: dict[int, Extras | None] = {}  # rows run, not yet taken
        self._lost: list[int] = []

    @classmethod
    def build(
        cls,
        env_fns_per_group: list[list],
        starts: list[int],
        shared: SharedMemory | None,
        workers: list[int] | None = None,
        rows: Sequence[Sequence[int]] | None = None,
    ) -> LocalExecutor:
        """Groups of sub-envs built here; ``workers``: the worker each group stands for
        (named in its errors; None: the groups are no workers, as ``SerialEnv``'s);
        ``rows``: per group, the rows of each sub-env (default one each). Without
        ``shared`` (a start in two phases: ``starts`` are then the groups' first sub-envs)
        the groups wait for :meth:`attach`."""
        groups: list[SubEnvGroup] = []
        try:
            for g, (fns, start) in enumerate(zip(env_fns_per_group, starts)):
                worker = None if workers is None else workers[g]
                where = "in the calling process"
                group = SubEnvGroup(
                    fns,
                    start,
                    rows=None if rows is None else rows[g],
                    worker_index=worker,
                    where=where if worker is None else f"worker {worker}, {where}",
                )
                groups.append(group)
                if shared is not None:
                    group.attach(start, shared.buffers, shared.control)
        except BaseException:
            close_each(groups)
            raise
        return cls(groups)

    def sub_env_summaries(self) -> list[SubEnvSummary]:
        return [summary for group in self.groups for summary in group.sub_env_summaries()]

    def attach(self, shared: SharedMemory, layout: WorkerLayout) -> None:
        """Lay the groups out over the buffers, one after the other from row 0."""
        row = 0
        try:
            for group in self.groups:
                row = group.attach(row, shared.buffers, shared.control).stop
        except BaseException:
            self.close()
            raise
        self.bounds = [(g.start, g.stop) for g in self.groups]

    def summaries(self) -> list[SubEnvSummary]:
        return [summary for group in self.groups for summary in group.summaries()]

    def local_envs(self) -> list[Any]:
        return [env for group in self.groups for env in group.envs]

    def send(self, call: Call) -> None:
        pass  # everything runs in wait(); object actions are already in this process's lists

    def wait(
        self, call: Command, timeout: float | None = None, meanwhile: Meanwhile | None = None
    ) -> dict[int, Extras]:
        # Nothing runs elsewhere, so nothing overlaps with this process's share (no
        # ``meanwhile``), and nothing could cut a sub-env short at ``timeout``.
        if len(self.groups) == 1:  # (each run returns a dict of its own)
            return self.groups[0].run(call.options)
        extras: dict[int, Extras] = {}
        for group in self.groups:
            extras.update(group.run(call.options))
        return extras

    def drain(self, call: Call, timeout: float | None = None) -> None:
        pass  # nothing runs elsewhere: nothing is left to wait for

    # ---- first-ready commands: each row runs within a wait, in the order sent ----------------
    def send_some(self, rows: Sequence[int]) -> None:
        self.queue.extend(rows)

    def resend_some(self, rows: Sequence[int]) -> None:
        queued = set(self.queue)  # (the rows sent were not in flight: none was queued)
        self.queue.extend(row for row in rows if row not in queued)

    def run_next(self) -> list[int]:
        """Run the first row queued, with the rest of its unit (a block's rows: see
        ``SubEnvGroup.unit_of``); returns the rows run (their extras wait in ``finished``)."""
        row = self.queue.popleft()
        group = self.groups[group_of(row, self.bounds)]
        unit = group.unit_of(row)
        if len(unit) > 1:  # the unit's other rows were queued with it: they run now
            self.queue = deque(r for r in self.queue if r not in unit)
        try:
            extras = group.run(None, only=row)
        except BaseException:  # raised, or interrupted mid-command: its state is unknown
            self._lost.extend(unit)
            raise
        for r in unit:
            self.finished[r] = extras.get(r)
        return list(unit)

    def wait_some(self, take: Take) -> dict[int, Extras | None]:
        rows, min_get, max_get, timeout, _ = take  # (no row here can be cut short)
        # Nothing could cut a sub-env short: the timeout is checked between rows (at least
        # one runs per wait, so waits always make progress).
        deadline = None if timeout is None else time.monotonic() + timeout
        finished = self.finished
        while sum(row in finished for row in rows) < min_get:
            self.run_next()
            late = deadline is not None and time.monotonic() > deadline
            if late and sum(row in finished for row in rows) < min_get:
                raise TimeoutError(
                    f"first-ready wait: fewer than {min_get} sub-envs finished within {timeout} s"
                )
        return take_finished(finished, rows, max_get)

    def take_lost(self) -> list[int]:
        lost, self._lost = self._lost, []
        return lost

    def add_info_fields_in_flight(self, places: dict) -> bool:
        for group in self.groups:  # queued rows run only within a wait: none is running
            group.add_info_fields(places)
        return True

    def request_send(self, call: Request) -> None:
        pass  # runs in request_wait()

    def request_wait(self, call: Request, timeout: float | None = None) -> list:
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
        self.queue.clear()
        self.finished.clear()
        close_each(groups)
