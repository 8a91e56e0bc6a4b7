"""Faults that heal, the engine's part (API section 13): what a command's faults become.

Where the sub-envs live, a sub-env that raised was rebuilt already and its row reads as
truncated (``subenvs/healing.py``); a worker that died or outlasted ``timeout=`` was started
again by its executor, which reports its rows the same way (``Extras.fault``). Here each
fault is booked (``FaultBook``: one WARNING per restart; past the policy's limit a
``WorkerError`` as "raise" would), and the rebuilt sub-env's first reset is seeded with
``restart_seed(the row's last reset seed, its restarts)``:

* a fault in a reset: the reset is run again at once on the rebuilt sub-envs;
* a fault in a SAME_STEP step: the rebuilt sub-envs are reset into the root at once;
* NEXT_STEP: the row is finished, so the next step resets it (seeded here);
* DISABLED: the row waits for the caller's reset (seeded here, unless the caller seeds it).

A block is one sub-env of several rows: one restart, its fault on all of its rows. In
first-ready batches (``FirstReady._heal``) a step's faulted rows come back as truncated, and a
reset that faulted is sent again on the rebuilt sub-env: nobody waits for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.backends.executor import Executor, group_of
from gymvec.common.faults import Fault, FaultBook, restart_seed
from gymvec.errors import WorkerError
from gymvec.wire.calls import Command, Request
from gymvec.wire.commands import RESET, RESET_NEXT, Extras


class Healing:
    """The engine's books of faults that heal (``engine`` typed Any: it holds this part)."""

    def __init__(self, engine: Any, book: FaultBook):
        self.engine = engine
        self.book = book
        self.last_seeds: list[int | None] = [None] * engine.num_envs  # the caller's, per row
        self.reseeds: dict[int, int | None] = {}  # row -> its rebuilt sub-env's first seed
        self.heals_hangs = False  # the executor ends workers past the engine's timeout
        layout = engine.worker_layout  # (a block is one sub-env of several rows)
        self.sub_env_of = np.repeat(np.arange(layout.num_sub_envs), layout.rows_per_sub_env)
        self.block_rows = frozenset(r for r, s in enumerate(engine.summaries) if s.block)

    def start(self, executor: Executor) -> None:
        """Ask a new executor's groups to heal (the ``heal_faults`` request), and the
        executor to start its dead or hung workers again (``heal_deaths``)."""
        call = Request("heal_faults", list(range(self.engine.num_envs)), {})
        executor.request_send(call)
        executor.request_wait(call)
        self.heals_hangs = executor.heal_deaths(self.engine.factories.worker_env_fns)

    def wait_of(self, executor: Executor) -> Callable[..., dict[int, Extras]]:
        """The wait of a command that the caller gives no timeout: past the engine's own,
        the busy workers are ended and started again (faults of kind "timeout") instead of
        the engine being stuck."""
        if not self.heals_hangs or self.engine.life.timeout is None:
            return executor.wait

        def wait(call: Command, timeout: float, *args: Any) -> dict[int, Extras]:
            try:
                return executor.wait(call, timeout, *args)
            except TimeoutError:
                if not executor.end_busy(timeout):
                    raise
                return executor.wait(call, timeout, *args)  # (resumed: the others' answers)

        return wait

    def note_seeds(self, seeds: Sequence[int | None] | None, mask: np.ndarray | None) -> None:
        """A reset the caller seeds: its seeds are the rows' last."""
        if seeds is None:
            return
        for row, seed in enumerate(seeds):
            if seed is not None and (mask is None or mask[row]):
                self.last_seeds[row] = seed

    def faults_of(self, call: Command, extras: dict[int, Extras]) -> dict[int, str] | None:
        """The faults ``extras`` report, booked (a ``WorkerError`` past the limit); their
        rows read as truncated. None where there is none."""
        faulted = {row: e.fault for row, e in extras.items() if e.fault is not None}
        if not faulted:
            return None
        engine, book = self.engine, self.book
        messages = {}
        by_sub_env: dict[int, list[int]] = {}  # (a block's fault is on each of its rows)
        for row in faulted:
            by_sub_env.setdefault(int(self.sub_env_of[row]), []).append(row)
        for sub_env, its_rows in by_sub_env.items():
            kind, message, traceback = faulted[its_rows[0]]
            worker = group_of(its_rows[0], engine.worker_bounds)
            fault = Fault(sub_env, tuple(its_rows), worker, kind, message, traceback)
            if not book.allows(sub_env):
                raise WorkerError(
                    book.past_limit(fault), worker_index=worker, sub_env_index=its_rows[0]
                )
            book.record(fault)
            for row in its_rows:
                extras[row].fault = None
                self.reseeds[row] = restart_seed(self.last_seeds[row], int(book.restarts[sub_env]))
                messages[row] = message
        rows = list(faulted)
        slot = engine.buffers.next
        # rows left unwritten: a worker died or hung, or a block raised
        lost = [row for row in rows if faulted[row][0] != "error" or row in self.block_rows]
        if lost and call.kind == "step":
            self.restore_last_obs(call, lost)
        if call.kind == "step":
            engine.buffers.reward[rows] = 0.0
            slot.terminated[rows] = False
            slot.truncated[rows] = slot.done[rows] = True
        return messages

    def first_ready_seeds(
        self, rows: list[int], resetting: Sequence[bool], seeds: Sequence[int | None] | None
    ) -> list[int | None]:
        """The seeds of a first-ready command to ``rows`` (``resetting``: which of them
        reset): the caller's (each the row's last), and for the rebuilt sub-envs it resets
        that the caller does not seed, their first seeds."""
        out: list[int | None] = [None] * len(rows) if seeds is None else list(seeds)
        for k, row in enumerate(rows):
            if out[k] is not None:
                self.last_seeds[row] = out[k]
            if resetting[k] and row in self.reseeds:
                seed = self.reseeds.pop(row)
                out[k] = seed if out[k] is None else out[k]
        return out

    def restore_last_obs(self, call: Command, rows: list[int]) -> None:
        """Give ``rows`` of a step whose worker died their last observation in the step's
        lane: the dead worker wrote nothing there (it died in a sub-env's step; one killed
        mid-write leaves what it wrote), so it is where the previous call left it, the
        root where that is current, else the previous call's lane (that array is the
        caller's, who may have written in it)."""
        engine = self.engine
        buffers, stale = engine.buffers, engine.books.root_stale
        lanes = buffers.obs_lanes
        source_lane = engine.lanes.previous if call.lane else 0
        for key, target in buffers.next.obs.items():
            if lanes and call.lane:
                target = lanes[call.lane]
            previous = lanes[source_lane] if lanes and source_lane else buffers.next.obs[key]
            for row in rows:
                target[row] = buffers.root.obs[key][row] if not stale[row] else previous[row]

    def follow_up(self, call: Command, faults: dict[int, str]) -> dict[int, Extras]:
        """What the faults of ``call`` (booked) ask for now: a reset run again, or under
        SAME_STEP the rebuilt sub-envs reset into the root; returns its extras."""
        engine = self.engine
        if call.kind == "step" and call.autoreset is not AutoresetMode.SAME_STEP:
            return {}  # NEXT_STEP resets them at the next step, DISABLED at the caller's
        mask = np.zeros(engine.num_envs, dtype=bool)
        mask[list(faults)] = True
        into = "root" if call.kind == "step" else call.into
        options = call.options if call.kind == "reset" else None
        return engine.reset(mask, into=into, options=options).extras

    def seeded_step(self, modes: Any) -> tuple[Any, list | None]:
        """The modes of a step, and the seeds of the rebuilt sub-envs it resets (their
        first reset; ``modes`` as the planner gave them)."""
        n = self.engine.num_envs
        bytes_ = np.frombuffer(bytes(modes), np.uint8) if not isinstance(modes, int) else None
        if bytes_ is None:
            bytes_ = np.full(n, modes, dtype=np.uint8)
        seeds: list[int | None] = [None] * n
        for row in [r for r in self.reseeds if bytes_[r] & RESET or r in self.block_rows]:
            if not bytes_[row] & RESET:  # a block that resets its own rows: reset it, seeded
                bytes_[row] = RESET_NEXT
            seeds[row] = self.reseeds.pop(row)
        return bytes_.copy(), seeds

    def seeded_reset(
        self, mask: np.ndarray | None, seeds: Sequence[int | None] | None
    ) -> list[int | None] | None:
        """The seeds of a reset: the caller's, and for the rebuilt sub-envs it resets that
        the caller does not seed, their first seeds."""
        n = self.engine.num_envs
        out: list[int | None] = [None] * n if seeds is None else list(seeds)
        for row in [r for r in self.reseeds if mask is None or mask[r]]:
            seed = self.reseeds.pop(row)
            if out[row] is None:
                out[row] = seed
        return out
