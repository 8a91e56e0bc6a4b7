"""The batch engine: what both front ends drive, in verbs.

A :class:`BatchEngine` owns the buffers (one preallocated block, ``buffers.py``), the control
block (``wire/commands.py``) and an executor that runs the sub-envs (``backends/local.py``: in
this process; ``backends/processes/executor.py``: in worker processes). It speaks in verbs:

* ``step_send(autoreset=...)`` / ``recv()``: step every sub-env with the actions in
  ``buffers.action``, handling finished sub-envs by gymnasium's ``AutoresetMode``
  (``commands.step_modes``);
* ``reset_send(mask, seeds=..., options=..., into="root" | "next")`` / ``recv()``;
* ``request(name, indices, **kwargs)``: attribute access and method calls on sub-envs
  (``requests.py``);
* first-ready commands, to some sub-envs, taken back as they finish
  (``first_ready.py``): ``async_step_send(indices, autoreset)`` /
  ``async_reset_send(indices, seeds=..., into=...)`` / ``async_recv(kind, min_get, ...)``.

Faults that heal (API section 13): ``BatchEngine(..., on_fault=Restart(...))`` (None, the
default: ``"raise"``, today's behaviour) rebuilds a sub-env that raised in a whole-batch step
or reset where it lives, and a worker process that died or outlasted ``timeout=`` in a new
process of the same start method; ``recv()``'s :class:`Received` then names the faulted rows
and their messages in ``faults`` (row -> the string ``infos["fault"]`` shows), those rows read
as truncated (reward 0, flags in the buffers), and their observation is for the front end to
give back (the row's last one, which it returned before). ``fault_book`` (a
``common.faults.FaultBook``, None under "raise") holds ``restarts`` (per sub-env) and
``faults`` (``gymvec.Fault`` records, oldest first); past the policy's limit a fault raises
``WorkerError`` as "raise" would. The rebuilt sub-env's first reset is seeded with
``restart_seed(the row's last reset seed, its restart count)``: see ``healing.py``.

The whole-batch verbs live here; the call in flight in ``life.CallLife``, what the engine
knows of its sub-envs between calls in ``books.Books``, the executor in ``slot.ExecutorSlot``,
the modes of each autoreset policy in ``commands.step_modes``, learnt info fields in
``info_learning``.

Results land in the buffers (numpy views, no copy): ``buffers.next`` holds each step's
transition, ``buffers.root`` each sub-env's current observation once a reset into the root or
a SAME_STEP step wrote it. ``recv`` returns what did not fit the buffers (the
extras) and, where the caller asked to ``handout`` the observations, the array that holds
them. The engine imports neither torch nor tensordict: the gymnasium face runs on it alone,
and worker processes import its modules.

Example:
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> from gymnasium.vector import AutoresetMode
    >>> from gymvec.engine import BatchEngine, SubEnvFactories, serial_backend
    >>> engine = BatchEngine(SubEnvFactories(1, lambda: gym.make("CartPole-v1"), None, 3),
    ...                      serial_backend())
    >>> _ = engine.reset(seeds=[0, 1, 2], into="next")
    >>> engine.buffers.action[("action",)][:] = [0, 1, 0]
    >>> _ = engine.step(AutoresetMode.NEXT_STEP)
    >>> engine.buffers.next.reward.tolist()
    [1.0, 1.0, 1.0]
    >>> engine.close()
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.backends.backend import Backend, process_backend, serial_backend
from gymvec.backends.executor import Executor, SharedMemory
from gymvec.common.faults import FaultBook, Restart
from gymvec.common.infos import InfoField
from gymvec.engine.books import Books
from gymvec.engine.first_ready import FirstReady
from gymvec.engine.healing import Healing
from gymvec.engine.info_learning import InfoLearner
from gymvec.engine.life import CallLife
from gymvec.engine.planning import plan_from_probe, plan_from_workers
from gymvec.engine.requests import Requests
from gymvec.engine.slot import ExecutorSlot
from gymvec.subenvs.block import check_blocks, resets_finished_rows
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.kinds import SubEnvSummary, spaces_of_summaries
from gymvec.subenvs.layout import WorkerLayout
from gymvec.subenvs.probe import (
    KeptEnv,
    expand_seeds,
    masked_seeds,
)
from gymvec.wire.buffers import BufferLayout, Buffers, LaneChoice
from gymvec.wire.calls import Command, InfoPlaces, Into, Ready, Received
from gymvec.wire.commands import (
    RESET,
    RESET_NEXT,
    SYNC_ROOT,
    Control,
    Modes,
    lane_modes,
    step_modes,
)

__all__ = [
    "OBS_LANES",
    "Backend",
    "BatchEngine",
    "Ready",
    "Received",
    "expand_seeds",
    "masked_seeds",
    "process_backend",
    "serial_backend",
]

OBS_LANES = 3  # observation lanes of a batch of large observations (see BufferLayout)


class BatchEngine:
    """A batch of sub-envs behind shared buffers, driven by verbs (see the module docstring).

    Args:
        factories: which factory builds each sub-env, and the workers' rows.
        backend: where the buffers live and the sub-envs run (``serial_backend()``,
            ``process_backend(...)``).
        obs_lanes: spare buffers for large observations that callers may hand out.
        timeout: seconds a command or request may take when the caller gives no timeout of
            its own (None: as long as it takes). Past it the wait raises
            ``SubEnvTimeoutError`` and the engine refuses further calls: only ``close()``
            is left, and it ends the busy workers at once (with ``on_fault``, the worker is
            killed and rebuilt instead: a fault of kind "timeout").
        on_fault: None ("raise") or a ``gymvec.Restart`` policy (see the module docstring).

    Construction resets and steps nothing. Where one factory builds every sub-env (or one
    per task), it builds the first (one per task) in this process to learn the layout from
    its spaces, and the executor starts on first use; where each sub-env has a factory of
    its own (blocks of any size mixed with single envs), the executor starts at once, in two
    phases: the sub-envs are built where they run and report their spaces and rows, then
    take their rows of the buffers laid out from them (see ``planning.py``). Info
    fields are those the sub-envs declare; :meth:`learn_info_fields` adds those of their
    first results.

    Parts: ``life`` (:class:`~gymvec.engine.life.CallLife`: the call in flight), ``books``
    (:class:`~gymvec.engine.books.Books`: ``finished``, ``root_stale`` and the like), ``slot``
    (:class:`~gymvec.engine.slot.ExecutorSlot`: the executor, started on first use),
    ``first_ready`` (:class:`~gymvec.engine.first_ready.FirstReady`: first-ready commands),
    ``learner`` (:class:`~gymvec.engine.info_learning.InfoLearner`), ``lanes``
    (:class:`~gymvec.wire.buffers.LaneChoice`: the observation lane in use).
    """

    # Laid out at the start (planning.lay_out)
    worker_layout: WorkerLayout
    num_envs: int  # rows: a block fills several
    worker_bounds: list[tuple[int, int]]
    info_fields: dict[str, InfoField]
    layout: BufferLayout
    buffers: Buffers
    control: Control
    shared: SharedMemory
    heterogeneous: bool

    def __init__(
        self,
        factories: SubEnvFactories,
        backend: Backend,
        *,
        obs_lanes: int = OBS_LANES,
        timeout: float | None = None,
        on_fault: Restart | None = None,
    ) -> None:
        self.factories = factories
        self.on_fault = on_fault
        self.backend = backend
        self.num_workers = factories.num_workers
        self.life = life = CallLife(timeout)
        self.check_not_stuck = life.check_not_stuck  # (bound here)
        self.slot = slot = ExecutorSlot(backend)
        self.multi_task = factories.one_per_worker()
        self._kept = KeptEnv(None)
        plan = plan_from_probe if factories.rows_known(self.multi_task) else plan_from_workers
        summaries = plan(self, obs_lanes)
        self._mode_bytes = self.control.mode.data
        self.summaries: list[SubEnvSummary] = summaries
        self.metadata: dict = summaries[0].metadata
        self.render_mode: str | None = summaries[0].render_mode
        self.books = books = Books(self.num_envs, self.buffers)
        self.finished, self.root_stale = books.finished, books.root_stale  # (the same arrays)
        self._modes_none_finished = {m: step_modes(m, books.finished, False) for m in AutoresetMode}
        # Only NEXT_STEP's modes depend on which sub-envs finished, and not for a batch of
        # NEXT_STEP blocks alone: they reset their finished rows in their own step
        planned = not all(map(resets_finished_rows, summaries))
        self._plans_rows = {m: planned and m is AutoresetMode.NEXT_STEP for m in AutoresetMode}
        self.lanes = LaneChoice(self.buffers, self.control.lane)
        self.has_observation_lanes = self.buffers.has_lanes and not self.heterogeneous
        # (bound, not wrapped: the face writes actions every step)
        self.write_action = self.buffers.write_action
        self.write_action_rows = self.buffers.write_action_rows
        self._object_actions = bool(self.layout.object_action_keys)
        self.object_obs = bool(self.layout.object_obs_keys)
        # A step is the same message every time (but its lane, see _send): one per mode
        objects = self.buffers.action_objects if self._object_actions else None
        self._step_commands = {
            mode: Command("step", mode, action_objects=objects) for mode in AutoresetMode
        }
        self.learner = InfoLearner(self.layout, self.num_envs)
        self.first_ready = first_ready = FirstReady(
            slot,
            life,
            books,
            self.buffers,
            self.control,
            self.lanes,
            self.learner,
            self.object_obs,
            self.worker_layout.unit_size,
        )
        # The first-ready verbs (bound here, not wrapped: no call in between)
        self.async_step_send = first_ready.step_send
        self.async_reset_send = first_ready.reset_send
        self.async_recv = first_ready.recv
        self.async_rows = first_ready.rows
        self.requests = requests = Requests(
            slot, life, self.num_envs, first_ready.check_none_flying
        )
        self.request, self.request_send = requests.request, requests.send
        self.request_recv = requests.recv
        # faults that heal (see the module docstring): None under "raise"
        self.num_sub_envs = self.worker_layout.num_sub_envs
        self.fault_book = None if on_fault is None else FaultBook(on_fault, self.num_sub_envs)
        self.healing = None if self.fault_book is None else Healing(self, self.fault_book)
        first_ready.healing = self.healing
        if self.healing is not None:
            slot.on_start = self.healing.start  # (each executor started from now on)
            if slot.current is not None:  # (started already, in two phases)
                self.healing.start(slot.current)

    # ---- parts and state ------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        """The running executor; the sub-envs are built on first use."""
        return self.slot.executor

    @property
    def closed(self) -> bool:
        return self.slot.closed

    @property
    def any_finished(self) -> bool:
        """Whether a sub-env finished an episode and was not reset since (see ``finished``)."""
        return self.books.any_finished

    @property
    def stuck(self) -> TimeoutError | None:
        """The timeout that ended the engine's use (see ``timeout``), or None."""
        return self.life.stuck

    @property
    def timed_out(self) -> bool:
        """The last wait outlasted its timeout (the call is still in flight)."""
        return self.life.timed_out

    @property
    def in_flight(self) -> str | None:
        """The kind of call in flight ("step", "reset", "request"), or None."""
        call = self.life.call
        return None if call is None else call.kind

    # No call in flight and not stuck: a new call may start (the life's own flag, read
    # without a Python call: the face asks it every step)
    idle = property(operator.attrgetter("life.idle"))

    @property
    def interrupted(self) -> bool:
        """Whether the call in flight was interrupted (the next call ends it)."""
        return self.life.call is not None and self.life.interrupted

    def abandon(self) -> None:
        """Give the call in flight up: the next call reads its answers and drops them."""
        self.life.abandon()

    @property
    def flying(self) -> np.ndarray:
        """The sub-envs with a first-ready command in flight (int64)."""
        return self.first_ready.flying_rows

    def check_blocks(self, requested: str, what: str, batch_size: int | None = None) -> None:
        """A ValueError where a block cannot run as ``requested`` (see ``check_blocks``)."""
        check_blocks(self.summaries, self.worker_layout, requested, what, batch_size)

    def local_envs(self) -> list[Any]:
        """The sub-envs that live in this process (all of them for the serial backend)."""
        return self.executor.local_envs()

    def sub_env_spaces(self) -> tuple[list[Any], list[Any]]:
        """The gymnasium observation and action space of each sub-env."""
        return spaces_of_summaries(self.summaries)

    def learn_info_fields(self) -> None:
        """Learn buffer fields for the numeric info entries of the sub-envs' first results
        (for the gymnasium face, whose infos no spec fixes): ``recv`` and ``async_recv``
        give them their places in every process (``layout.info_fields`` grows in place).
        Until then, and past the reserve (``BufferLayout``), infos go as extras."""
        self.learner.start()

    def _adopt_info_fields(self, places: InfoPlaces) -> None:
        """Give learnt info fields their places in every process: one request to the sub-env
        groups, after the command that taught them ended."""
        self.request("add_info_fields", places=places)
        self.buffers.add_info_fields(places)  # (done already where groups share them)

    # ---- verbs --------------------------------------------------------------------------------
    def step_send(
        self, autoreset: AutoresetMode = AutoresetMode.DISABLED, *, handout: bool = False
    ) -> None:
        """Step every sub-env with the actions in ``buffers.action`` (see
        ``commands.step_modes`` for what each ``AutoresetMode`` does with finished sub-envs);
        the transitions land in ``buffers.next``. After a SAME_STEP step the root is current,
        and the last observation of each sub-env it reset is in ``buffers.next`` (or the
        lane), or, where that cannot hold it exactly, in its extras (``final_obs``).

        ``handout``: the caller hands "next"'s observations out: they go to a free
        observation lane where there is one (see :class:`Received`); a SAME_STEP step into a
        lane leaves the root's observations of the rows it did not reset in the lane only.
        Object actions (``buffers.action_objects``) travel with the command.
        """
        books = self.books
        if books.any_finished and self._plans_rows[autoreset]:
            modes = step_modes(autoreset, books.finished, True)
        else:  # (the planner's answer for each mode, asked once: see __init__)
            modes = self._modes_none_finished[autoreset]
        seeds = None
        if self.healing is not None and self.healing.reseeds:  # rebuilt sub-envs to reset
            modes, seeds = self.healing.seeded_step(modes)
        self._send(self._step_commands[autoreset], modes, seeds, handout)

    def reset_send(
        self,
        mask: np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        into: Into = "root",
        handout: bool = False,
    ) -> None:
        """Reset the sub-envs ``mask`` marks (all if None) into ``buffers.root`` or, with
        ``into="next"``, into ``buffers.next`` (as a transition: reward 0, flags False).

        ``seeds[i]`` seeds sub-env ``i`` (None: unseeded; seeds of rows outside ``mask`` are
        ignored); ``options`` go to every reset. A reset into the root also brings the root
        of the other sub-envs up to date. ``handout``: see :meth:`step_send` (a reset of every
        sub-env into "next" only).
        """
        if into not in ("root", "next"):
            raise ValueError(f"into: expected 'root' or 'next', got {into!r}")
        reset_mode = RESET if into == "root" else RESET_NEXT
        healing = self.healing
        if healing is not None:
            if mask is not None:
                mask = np.asarray(mask, dtype=bool).reshape(self.num_envs)
            healing.note_seeds(seeds, mask)
            if healing.reseeds:
                seeds = healing.seeded_reset(mask, seeds)
        if mask is None:
            modes: Modes = reset_mode
        else:
            mask = np.asarray(mask, dtype=bool).reshape(self.num_envs)
            others = np.where(self.books.root_stale, SYNC_ROOT, 0) if into == "root" else 0
            modes = np.where(mask, reset_mode, others).astype(np.uint8)
            seeds = masked_seeds(seeds, mask)
        command = Command("reset", into=into, options=options, mask=mask)
        self._send(command, modes, seeds, handout)

    def recv(
        self, timeout: float | None = None, meanwhile: Callable[[int], object] | None = None
    ) -> Received:
        """Wait for the command sent last. ``timeout``: raise ``TimeoutError`` past it; the
        command stays in flight, a later ``recv`` resumes it. ``meanwhile(k)``: called once
        this process has run its share of the command while worker processes still run
        theirs (rows ``[0, k)`` are then done and may be copied out); not called where
        nothing runs here ahead of the workers, nor for a command into an observation lane.
        Info fields learnt from the results (see :meth:`learn_info_fields`) get their
        places before it returns."""
        life, executor = self.life, self.slot.current
        call = life.call
        if not isinstance(call, Command) or life.interrupted or life.stuck or executor is None:
            life.refuse_recv(executor, "command", timeout)
        lane = call.lane
        wait = executor.wait
        if life.timeout is not None and timeout is None and self.healing is not None:
            wait = self.healing.wait_of(executor)  # past the engine's timeout: heal
        extras = life.wait(call, wait, timeout, None if lane else meanwhile)
        if self.object_obs:
            self.buffers.store_objects(extras)
        faults = None
        if extras and self.healing is not None:
            faults = self.healing.faults_of(call, extras)
        self.books.update(call)
        if faults:
            extras.update(self.healing.follow_up(call, faults))  # type: ignore[union-attr]
        learner = self.learner
        if learner.active:
            places = learner.learn(extras, slice(None) if call.kind == "step" else [])
            if places:
                self._adopt_info_fields(places)
        observations = self.lanes.handed_out(lane) if lane else None
        return Received(call.kind, call.mask, extras, observations, faults)

    def step(self, autoreset: AutoresetMode = AutoresetMode.DISABLED, **kwargs: Any) -> Received:
        """``step_send`` then ``recv``."""
        self.step_send(autoreset, **kwargs)
        return self.recv()

    def reset(self, mask: np.ndarray | None = None, **kwargs: Any) -> Received:
        """``reset_send`` then ``recv``."""
        self.reset_send(mask, **kwargs)
        return self.recv()

    # ---- the round trip -------------------------------------------------------------------------
    def _ready(self) -> Executor:
        """The executor, once the call in flight (if any) is over."""
        self.life.check_not_stuck()
        executor = self.executor
        self.life.clear(executor)
        return executor

    def _send(
        self, command: Command, modes: Modes, seeds: Sequence[int | None] | None, handout: bool
    ) -> None:
        life = self.life
        executor = self.slot.current
        if (
            executor is None
            or life.call is not None
            or life.reset_required
            or self.first_ready.dirty
        ):
            executor = self._ready()
            self.first_ready.check_whole_batch(command)
            if life.reset_required:
                life.check_resets_all(modes)
        control, books = self.control, self.books
        # Step after step the same mode goes to every sub-env: the bytes already hold it.
        uniform = modes if type(modes) is int else None
        if type(modes) is bytes:  # one byte per sub-env: a memoryview takes them at C speed
            self._mode_bytes[:] = modes
        elif uniform is None or uniform != books.uniform_mode:
            control.mode[:] = modes
        books.uniform_mode = uniform
        into_lane = handout and self.has_observation_lanes  # (asked before SEED is written:)
        into_lane = into_lane and lane_modes(control, uniform, command.kind)
        if seeds is not None and control.write_seeds(seeds):
            books.uniform_mode = None
        lanes = self.lanes
        if into_lane or lanes.current:
            lane = lanes.choose(into_lane)
            if lane:
                command = dataclasses.replace(command, lane=lane)
        life.post(command, executor.send)

    # ---- lifetime -----------------------------------------------------------------------------
    def restart(self) -> None:
        """Close the sub-envs; they are built again (with the factories' current kwargs) on
        the next use."""
        executor = self.slot.take()
        self.life.ended()
        self.first_ready.clear()
        self._kept.close()  # built with the kwargs of before
        if executor is not None:
            executor.close()

    def close(self) -> None:
        """Close every sub-env, stop the workers and free the buffers. Closing twice is
        harmless; a sub-env's close error is raised after the rest is done."""
        slot = self.slot
        if slot.closed:
            return
        slot.closed = True
        executor = slot.take()
        try:
            self._kept.close()
            if executor is not None:
                executor.close()  # a sub-env's close may raise: the memory goes all the same
        finally:
            self.backend.release()

    def __repr__(self) -> str:
        return (
            f"BatchEngine({self.backend.name}, num_envs={self.num_envs}, "
            f"num_workers={self.num_workers})"
        )
