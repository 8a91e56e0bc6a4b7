"""The batch engine: what both front ends drive, in verbs.

A :class:`BatchEngine` owns the buffers (one preallocated block, ``buffers.py``), the control
block (``commands.py``) and an executor that runs the sub-envs (``executor.py``: in this
process; ``processes.py``: in worker processes). It speaks in verbs:

* ``step_send(autoreset=..., keep_final_obs=...)`` / ``recv()``: step every sub-env with the
  actions in ``buffers.action``, handling finished sub-envs by an :class:`Autoreset` policy;
* ``reset_send(mask, seeds=..., options=..., into="root" | "next")`` / ``recv()``;
* ``request(name, indices, **kwargs)``: attribute access and method calls on sub-envs;
* first-ready commands, to some sub-envs, taken back as they finish:
  ``async_step_send(indices, autoreset)`` / ``async_reset_send(indices, seeds=..., into=...)``
  / ``async_recv(kind, min_get, max_get, timeout)``.

Results land in the buffers (numpy views, no copy): ``buffers.next`` holds each step's
transition, ``buffers.root`` each sub-env's current observation once a reset into the root or
a step with ``current_root`` wrote it. ``recv`` returns what did not fit the buffers (the
extras) and, where the caller asked to ``handout`` the observations, the array that holds
them. The engine imports neither torch nor tensordict: the gymnasium face runs on it alone,
and worker processes import its modules.

Example:
    >>> import gymnasium as gym
    >>> import numpy as np
    >>> from gymvec.engine import Autoreset, BatchEngine, SubEnvFactories, serial_backend
    >>> engine = BatchEngine(SubEnvFactories(1, lambda: gym.make("CartPole-v1"), None, 3),
    ...                      serial_backend())
    >>> _ = engine.reset(seeds=[0, 1, 2], into="next")
    >>> engine.buffers.action[("action",)][:] = [0, 1, 0]
    >>> _ = engine.step(Autoreset.NEXT_STEP)
    >>> engine.buffers.next.reward.tolist()
    [1.0, 1.0, 1.0]
    >>> engine.close()
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from gymvec.common.arrays import any_set
from gymvec.common.infos import InfoField, infer_info_fields
from gymvec.common.structure import LeafSpec
from gymvec.engine.buffers import BufferLayout, Buffers, MemmapMemory, private_memory
from gymvec.engine.commands import (
    AUTORESET,
    KEEP_FINAL_OBS,
    LANE_MODES,
    RESET,
    RESET_NEXT,
    SEED,
    STEP,
    STEP_OR_RESET_NEXT,
    SYNC_ROOT,
    WITH_SYNC_ROOT,
    Autoreset,
    Control,
    Extras,
)
from gymvec.engine.executor import Blocks, Call, Executor, LocalExecutor, OnLocalDone
from gymvec.engine.factories import SubEnvFactories
from gymvec.engine.subenvs import REQUESTS, SubEnvSummary, check_sub_env, summarize
from gymvec.errors import ClosedEnvError, SpaceMismatchError, WorkerError

OBS_LANES = 3  # observation lanes of a batch of large observations (see BufferLayout)
_INT64 = np.iinfo(np.int64)

# What a sub-env has in flight as a first-ready command (``BatchEngine._flight``)
_IDLE, _STEP, _RESET_ROOT, _RESET_NEXT = 0, 1, 2, 3
# What each kind of first-ready receive takes: the flight codes in [low, high], and its name
_RECV_KINDS = {
    None: ((_STEP, _RESET_NEXT), "command"),
    "step": ((_STEP, _STEP), "step"),
    "reset": ((_RESET_ROOT, _RESET_NEXT), "reset"),
}


class Received(NamedTuple):
    """What ``BatchEngine.recv`` returns beside the buffers.

    ``kind``: the command it ends, "step" or "reset"; ``mask``: the sub-envs a reset reset
    (None: all). ``extras``: by sub-env index, what each reported that has no place in the
    buffers. ``observations``: the handed-out observation lane that holds "next"'s
    observations (an array nobody else refers to, see ``Buffers.handed_out_lanes``), or None
    when they are in ``buffers.next`` itself.
    """

    kind: str
    mask: np.ndarray | None
    extras: dict[int, Extras]
    observations: np.ndarray | None


class Ready(NamedTuple):
    """What ``BatchEngine.async_recv`` returns beside the buffers.

    ``indices``: the sub-envs whose first-ready command finished (int64, first finished
    first); their results are in their rows of the buffers until they are sent another
    command. ``extras``: by sub-env index, what each reported that has no place in the buffers.
    """

    indices: np.ndarray
    extras: dict[int, Extras]


@dataclasses.dataclass
class Backend:
    """Where an engine's buffers live and where its sub-envs run.

    ``new_memory(nbytes)`` makes a block; ``start(engine)`` starts the executor;
    ``release()`` frees what the blocks hold beyond the process (a memmap file).
    ``collect_on_exit``: stop the executor when the engine is garbage (worker processes).
    """

    name: str
    new_memory: Callable[[int], Any]
    start: Callable[[BatchEngine], Executor]
    release: Callable[[], None] = lambda: None
    collect_on_exit: bool = False
    first_here: bool = False  # sub-env 0 runs in this process (see BatchEngine.first_env_kept)


def serial_backend() -> Backend:
    """Sub-envs stepped one after the other in this process, in one group."""

    def start(engine: BatchEngine) -> Executor:
        # One group for all sub-envs: in one process, workers would only add loop overhead.
        fns = engine.first_env_kept(engine.factories.all_env_fns())
        return LocalExecutor.build([fns], [0], engine.blocks)

    return Backend("serial", private_memory, start, first_here=True)


def process_backend(options: Any, memmap: bool = False) -> Backend:
    """Sub-envs in worker processes (``options``: a ``ProcessOptions``), buffers in shared
    memory (or, with ``memmap``, in a temporary file)."""
    from gymvec.engine.buffers import shared_memory
    from gymvec.engine.processes import ProcessExecutor, refuse_start_while_importing_main

    refuse_start_while_importing_main()  # before anything is built

    memmaps: list[MemmapMemory] = []

    def new_memory(nbytes: int) -> Any:
        if not memmap:
            return shared_memory(nbytes)
        memory = MemmapMemory(nbytes)
        memmaps.append(memory)
        return memory

    def start(engine: BatchEngine) -> Executor:
        factories = engine.factories
        worker_env_fns = [factories.worker_env_fns(w) for w in range(factories.num_workers)]
        if options.local_worker:  # worker 0's share is built in this process
            worker_env_fns[0] = engine.first_env_kept(worker_env_fns[0])
        return ProcessExecutor(worker_env_fns, factories.worker_bounds, engine.blocks, options)

    def release() -> None:
        for memory in memmaps:
            memory.release()

    backend = Backend(
        "processes",
        new_memory,
        start,
        release,
        collect_on_exit=True,
        first_here=bool(options.local_worker),
    )
    backend.memmaps = memmaps  # type: ignore[attr-defined]
    return backend


def expand_seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None] | None:
    """gymnasium's convention: an int ``s`` seeds sub-env ``i`` with ``s + i``; a list gives
    each sub-env its seed (or None). Seeds are non-negative integers, as gymnasium's envs
    take them: anything else raises here, before any sub-env runs (a float used to be
    truncated, a negative seed to fail inside a sub-env)."""
    if seed is None:
        return None
    if isinstance(seed, int | np.integer):
        return [_checked_seed(seed, "seed") + i for i in range(n)]
    if isinstance(seed, str | bytes) or not isinstance(seed, Sequence | np.ndarray):
        raise TypeError(
            f"seed: expected an int, a list of {n} ints or None, or None; got "
            f"{type(seed).__name__} {seed!r}"
        )
    seeds = list(seed)
    if len(seeds) != n:  # gymnasium's own words, which its users (and tests) match
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={n} "
            f"but got length={len(seeds)}."
        )
    return [None if s is None else _checked_seed(s, f"seed[{i}]") for i, s in enumerate(seeds)]


def _checked_seed(seed: Any, where: str) -> int:
    if not isinstance(seed, int | np.integer):
        raise TypeError(
            f"{where}: expected a non-negative int or None, got {type(seed).__name__} {seed!r}"
        )
    if seed < 0:
        raise ValueError(f"{where}: expected a non-negative int, got {seed}")
    return int(seed)


def masked_seeds(
    seeds: Sequence[int | None] | None, mask: np.ndarray | None
) -> list[int | None] | None:
    """``seeds`` for the sub-envs ``mask`` marks, None for the others (a reset leaves them)."""
    if seeds is None or mask is None:
        return None if seeds is None else list(seeds)
    return [s if m else None for s, m in zip(seeds, np.asarray(mask).tolist())]


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
            is left, and it ends the busy workers at once.

    Construction builds the first sub-env (one per task of a multi-task batch) in this
    process to learn the layout from its spaces, then closes it, without resetting or
    stepping it; the executor starts on first use, or at once where the sub-envs have
    factories of their own (their spaces are checked then). Info fields are those the
    sub-envs declare; :meth:`learn_info_fields` adds those of their first results.
    """

    def __init__(
        self,
        factories: SubEnvFactories,
        backend: Backend,
        *,
        obs_lanes: int = OBS_LANES,
        timeout: float | None = None,
    ) -> None:
        self.factories = factories
        self.timeout = timeout
        self.stuck: TimeoutError | None = None  # the timeout that ended the engine's use
        self.timed_out = False  # the last wait outlasted its timeout (the call is in flight)
        self.backend = backend
        self.num_envs = factories.num_envs
        self.num_workers = factories.num_workers
        self.worker_bounds = factories.worker_bounds
        self._executor: Executor | None = None
        self._finalizer: Any = None
        self._call: Call | None = None
        self._reset_required = False  # an interrupted command left the sub-envs unknown
        self.closed = False
        self.multi_task = factories.one_per_worker()
        self._kept: Any = None  # the env built for sub-env 0's layout, until it becomes sub-env 0
        probed = self._probe(factories)
        try:
            self._allocate(probed, obs_lanes)
        except BaseException:
            self._drop_kept()
            raise
        try:
            if factories.single_factory():
                summaries = [probed[0]] * self.num_envs
            elif self.multi_task:
                summaries = probed
            else:  # one factory per sub-env (the drop-ins): ask the sub-envs themselves
                summaries = self.executor.summaries()
            self._check_summaries(summaries)
        except BaseException:
            self.close()
            raise
        self.summaries: list[SubEnvSummary] = summaries
        first = summaries[0]
        self.metadata: dict = first.metadata
        self.render_mode: str | None = first.render_mode
        self.finished = np.zeros(self.num_envs, dtype=bool)  # episode over, not reset since
        self._finished_bytes = memoryview(self.finished.view(np.uint8))  # (written each step)
        self.any_finished = False
        self.root_stale = np.zeros(self.num_envs, dtype=bool)  # root older than "next"
        self._uniform_mode: int | None = None  # the mode every control byte holds, if known
        self._lane = 0  # the observation lane that holds "next"'s observations now
        self._has_lanes = bool(self.buffers.obs_lanes) and not self.heterogeneous
        self._object_actions = bool(self.layout.object_action_keys)
        self._object_obs = bool(self.layout.object_obs_keys)
        self._learning = False  # info fields are learnt from the results (learn_info_fields)
        self._unstepped = np.zeros(0, dtype=bool)  # while learning: sub-envs not stepped yet
        # first-ready commands: what each sub-env has in flight (_STEP, ...; _IDLE: nothing),
        # and the sub-envs whose state an error or an interrupt left unknown (reset them)
        self._flight = np.zeros(self.num_envs, dtype=np.int8)
        self._flying = 0
        self._needs_reset = np.zeros(self.num_envs, dtype=bool)
        self._async_dirty = False  # some sub-env is in flight or needs a reset

    # ---- construction -------------------------------------------------------------------------
    def _probe(self, factories: SubEnvFactories) -> list[SubEnvSummary]:
        """Summaries of sub-envs built here: the first, or one per task (multi-task), with
        their info fields; every sub-env gets the summary of its task. Where sub-env 0 runs
        in this process, the env built for it stays to be sub-env 0 (see
        :meth:`first_env_kept`): no env is built twice."""
        firsts = factories.distinct() if self.multi_task else [0] * self.num_envs
        probed: dict[int, SubEnvSummary] = {}
        for first in dict.fromkeys(firsts):
            env = check_sub_env(factories.sub_env_fn(first)())
            try:
                probed[first] = summarize(env, declared_infos=True)
            except BaseException:
                env.close()
                raise
            if first == 0 and self.backend.first_here:
                self._kept = env
            else:
                env.close()
        return [probed[first] for first in firsts]

    def first_env_kept(self, fns: list[Callable[[], Any]]) -> list[Callable[[], Any]]:
        """``fns`` (sub-env 0's factory first) with sub-env 0 the env built to learn the
        layout, where it was kept: it is taken once, when the executor builds sub-env 0."""
        if self._kept is None:
            return fns

        def first() -> Any:
            kept, self._kept = self._kept, None
            return fns[0]() if kept is None else kept

        return [first, *fns[1:]]

    def _allocate(self, summaries: list[SubEnvSummary], obs_lanes: int) -> None:
        """Lay the buffers out for the keys of every task."""
        first = summaries[0]
        self.info_fields: dict[str, InfoField] = {
            name: field
            for name, field in first.info_fields.items()
            if all(s.info_fields.get(name) == field for s in summaries)
        }
        self.layout = BufferLayout(
            self.num_envs,
            _union_leaves([s.observation_leaves for s in summaries], "observation_spec"),
            _union_leaves([s.action_leaves for s in summaries], "action_spec"),
            self.info_fields,
            obs_lanes=obs_lanes,
            wide_actions=True,
        )
        memory = self.backend.new_memory(self.layout.nbytes)
        control_memory = self.backend.new_memory(Control.nbytes(self.num_envs))
        self.buffers = Buffers(self.layout, memory)
        self.control = Control(self.num_envs, control_memory)
        self._mode_bytes = memoryview(self.control.mode)
        self.blocks = Blocks(self.layout, memory, control_memory, self.buffers, self.control)

    def _check_summaries(self, summaries: list[SubEnvSummary]) -> None:
        """Sub-envs must agree on their keys, shapes and dtypes, but across the tasks of a
        multi-task batch (which is then ``heterogeneous``)."""
        first = summaries[0]
        self.heterogeneous = False
        for i, summary in enumerate(summaries):
            for name, a, b in (
                ("observation_spec", first.observation_leaves, summary.observation_leaves),
                ("action_spec", first.action_leaves, summary.action_leaves),
            ):
                if a == b:
                    continue
                if not self.multi_task:
                    raise SpaceMismatchError(
                        f"sub-env {i}: {name} leaves {b} differ from sub-env 0's {a}; a batch "
                        "needs the same keys, shapes and dtypes",
                        kind=name.split("_")[0],
                    )
                self.heterogeneous = True

    def learn_info_fields(self) -> None:
        """Give the numeric info entries of the sub-envs' first results buffer fields
        (``layout.info_fields`` grows in place), until every sub-env has stepped once; until
        then, and for entries that do not fit the reserve (see ``BufferLayout``), infos travel
        as extras. For front ends whose infos are built per call (the gymnasium face), not
        fixed by specs."""
        self._learning = True
        self._unstepped = np.ones(self.num_envs, dtype=bool)

    def _learn_infos(self, extras: dict[int, Extras], stepped: Any, first_ready: bool) -> None:
        """Fields for the entries that results reported as extras (the same type and shape
        in every sub-env that reported them), adopted by every process; learning ends once
        every sub-env has stepped (``stepped``: the rows these results stepped).

        After a whole-batch command nothing runs, so a request carries the fields to every
        group; after first-ready commands the executor hands them to its groups while rows
        may be in flight (the entries of those rows still come as extras)."""
        self._unstepped[stepped] = False
        if not self._unstepped.any():
            self._learning = False
        infos = [info for e in extras.values() for info in (e.root, e.next) if info]
        places = self.layout.place_info_fields(infer_info_fields(*infos)) if infos else None
        if not places:
            return
        if not first_ready:
            self.request("add_info_fields", places=places)
        elif not self._executor.add_info_fields_in_flight(places):
            self._learning = False  # this executor cannot: the entries stay extras
            return
        self.buffers.add_info_fields(places)  # (done already where groups share them)

    @property
    def executor(self) -> Executor:
        """The running executor; the sub-envs are built on first use."""
        if self.closed:
            raise ClosedEnvError("the env is closed: create a new one to go on")
        if self._executor is None:
            self._executor = self.backend.start(self)
            if self.backend.collect_on_exit:
                # Stop the workers (and free a memmap file) even if the user never closes
                # (before multiprocessing's own exit handler would wait for them forever).
                self._finalizer = weakref.finalize(
                    self, _shutdown, self._executor, self.backend.release, os.getpid()
                )
        return self._executor

    def local_envs(self) -> list[Any]:
        """The sub-envs that live in this process (all of them for the serial backend)."""
        return self.executor.local_envs()

    def sub_env_spaces(self) -> tuple[list[Any], list[Any]]:
        """The gymnasium observation and action space of each sub-env (from their specs
        where they are gymvec ``EnvBase`` sub-envs without spaces)."""
        spaces_of: dict[int, tuple] = {}  # per distinct summary
        for summary in self.summaries:
            if id(summary) in spaces_of:
                continue
            if summary.observation_space is not None:
                spaces_of[id(summary)] = (summary.observation_space, summary.action_space)
            else:
                from gymvec.spaces import spaces_of_specs  # torch is loaded: EnvBase sub-envs

                observation_spec, full_action_spec, _ = summary.specs
                spaces_of[id(summary)] = spaces_of_specs(observation_spec, full_action_spec)
        pairs = [spaces_of[id(summary)] for summary in self.summaries]
        return [obs for obs, _ in pairs], [action for _, action in pairs]

    # ---- verbs --------------------------------------------------------------------------------
    def step_send(
        self,
        autoreset: Autoreset = Autoreset.NONE,
        *,
        keep_final_obs: bool = False,
        current_root: bool = False,
        handout: bool = False,
    ) -> None:
        """Step every sub-env with the actions in ``buffers.action`` (see :class:`Autoreset`
        for what happens to finished sub-envs); the transitions land in ``buffers.next``.

        Args:
            keep_final_obs: with SAME_STEP, the last observation of each sub-env the step
                resets comes back in its extras as it returned it.
            current_root: also bring the root of the sub-envs that were not reset up to date,
                so that ``buffers.root`` holds every sub-env's current observation.
            handout: the caller hands "next"'s observations out: they go to a free
                observation lane where there is one (see :class:`Received`).

        Object actions (``buffers.action_objects``, see ``BufferLayout``) travel with it.
        """
        if autoreset is Autoreset.SAME_STEP:
            modes: Any = STEP | AUTORESET | (KEEP_FINAL_OBS if keep_final_obs else 0)
        elif autoreset is Autoreset.NEXT_STEP and self.any_finished:
            # the finished sub-envs reset, the others step: a byte translation of the flags
            modes = self.finished.tobytes().translate(STEP_OR_RESET_NEXT)
        else:
            modes = STEP
        if current_root:
            modes = modes | SYNC_ROOT if type(modes) is int else modes.translate(WITH_SYNC_ROOT)
        call = Call("step", autoreset, current_root)
        if self._object_actions:
            call.action_objects = self.buffers.action_objects
        self._send(call, modes, None, handout)

    def reset_send(
        self,
        mask: np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        into: str = "root",
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
        if mask is None:
            modes: Any = reset_mode
        else:
            mask = np.asarray(mask, dtype=bool).reshape(self.num_envs)
            others = np.where(self.root_stale, SYNC_ROOT, 0) if into == "root" else 0
            modes = np.where(mask, reset_mode, others).astype(np.uint8)
            seeds = masked_seeds(seeds, mask)
        call = Call("reset", into=into, options=options, mask=mask)
        self._send(call, modes, seeds, handout)

    def recv(
        self, timeout: float | None = None, on_local_done: OnLocalDone | None = None
    ) -> Received:
        """Wait for the command sent last.

        ``timeout``: raise ``TimeoutError`` past it; the command stays in flight and a later
        ``recv`` resumes the wait. ``on_local_done(k)``: called as soon as the sub-envs this
        process steps itself (rows ``[0, k)``) are done, while worker processes still run, so
        that the caller can start copying their rows (not for a command into a lane).
        """
        call = self._call
        if call is None or call.kind == "request" or call.interrupted or self.stuck:
            self._refuse_recv(call, timeout)
        own = timeout is None and self.timeout is not None  # the engine's timeout applies
        if own:
            timeout = self.timeout
        lane = call.lane
        if lane:  # the observations go to a lane: nothing is left to copy early
            on_local_done = None
        # (the try of _wait, inline: this runs every step)
        try:
            extras = self._executor.wait(call, timeout, on_local_done)
        except TimeoutError as exc:
            self._timed_out(exc, own)
            raise  # still in flight: a later recv() resumes the wait (but after `own`)
        except Exception:
            self._call = None  # a sub-env raised or a worker died: the command is over
            raise
        except BaseException:
            call.interrupted = True  # see _wait
            raise
        self._call = None
        self.timed_out = False
        if self._object_obs:
            self._store_objects(extras)
        self._book(call)
        if self._learning:
            self._learn_infos(extras, slice(None) if call.kind == "step" else [], False)
        observations = self.buffers.handed_out_lanes()[lane - 1] if lane else None
        return Received(call.kind, call.mask, extras, observations)

    def _timed_out(self, exc: TimeoutError, own: bool) -> None:
        """A wait outlasted its timeout; under the engine's own, the engine is stuck."""
        self.timed_out = True
        if own:
            self.stuck = exc

    def check_not_stuck(self) -> None:
        """A RuntimeError once a call outlasted the engine's own timeout."""
        if self.stuck is not None:
            raise RuntimeError(
                f"a call timed out under the env's timeout of {self.timeout} s ({self.stuck}); "
                "the env cannot go on: close() it (which ends the busy workers) and make a new one"
            )

    def _refuse_recv(self, call: Call | None, timeout: float | None) -> None:
        self.check_not_stuck()
        if call is None or call.kind == "request":
            raise RuntimeError("no command in flight: call step_send() or reset_send() first")
        # an interrupted command: its results are gone with the interrupted wait
        self._abandon(timeout)
        raise RuntimeError(
            "the command in flight was interrupted: its results are lost, and every "
            "sub-env must be reset before the next step"
        )

    def step(self, autoreset: Autoreset = Autoreset.NONE, **kwargs: Any) -> Received:
        """``step_send`` then ``recv``."""
        self.step_send(autoreset, **kwargs)
        return self.recv()

    def reset(self, mask: np.ndarray | None = None, **kwargs: Any) -> Received:
        """``reset_send`` then ``recv``."""
        self.reset_send(mask, **kwargs)
        return self.recv()

    def request(
        self, name: str, indices: Sequence[int] | None = None, /, *, timeout=None, **kwargs: Any
    ) -> list:
        """Run request ``name`` (see ``subenvs.REQUESTS``) on the sub-envs at ``indices``
        (all if None) and return one result per index. ``values`` (a keyword of set_attr
        and load_state_dict) holds one value per index."""
        self.request_send(name, indices, **kwargs)
        return self.request_recv(timeout)

    def request_send(
        self, name: str, indices: Sequence[int] | None = None, /, **kwargs: Any
    ) -> None:
        if name not in REQUESTS:
            raise ValueError(f"request: expected one of {sorted(REQUESTS)}, got {name!r}")
        indices = list(range(self.num_envs)) if indices is None else [int(i) for i in indices]
        for i in indices:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"sub-env index {i} out of range for {self.num_envs} sub-envs")
        values = kwargs.pop("values", None)
        if values is not None and len(values) != len(indices):
            raise ValueError(f"values: expected {len(indices)} values, got {len(values)}")
        executor = self._ready()
        call = Call("request", name=name, indices=indices, kwargs=kwargs, values=values)
        try:
            executor.request_send(call)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted while posting
                call.interrupted = True
                self._call = call
            raise
        self._call = call

    def request_recv(self, timeout: float | None = None) -> list:
        self.check_not_stuck()
        call = self._call
        if call is None or call.kind != "request":
            raise RuntimeError("no request in flight: call request_send() first")
        own = timeout is None and self.timeout is not None
        if own:
            timeout = self.timeout
        try:
            return self._wait(lambda: self.executor.request_wait(call, timeout))
        except TimeoutError as exc:
            self._timed_out(exc, own)
            raise

    @property
    def in_flight(self) -> str | None:
        """The kind of call in flight ("step", "reset", "request"), or None."""
        return None if self._call is None else self._call.kind

    @property
    def interrupted(self) -> bool:
        """Whether the call in flight was interrupted (the next call ends it)."""
        return self._call is not None and self._call.interrupted

    def abandon(self) -> None:
        """Give the call in flight up: its answers are read and dropped by the next call."""
        if self._call is not None:
            self._call.interrupted = True

    def write_action(self, key: tuple, values: np.ndarray) -> None:
        """Write every sub-env's action of leaf ``key`` (float64 values of a narrower float
        leaf go to its float64 twin, see ``Buffers.write_action``)."""
        self.buffers.write_action(key, values)

    # ---- first-ready commands -------------------------------------------------------------------
    def async_step_send(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        autoreset=Autoreset.NONE,
        *,
        write_actions: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        """Step the sub-envs at ``indices`` (all if None) with their rows of
        ``buffers.action``, each on its own: ``async_recv`` takes them back as they finish.

        ``autoreset``: NONE, or NEXT_STEP (a sub-env that finished at its previous step is
        reset into "next" instead, as a transition). A sub-env still in flight raises a
        ValueError naming it; nothing is sent then. ``write_actions(rows)``: called with the
        checked rows (int64) before anything is sent, to write their actions (an error there
        sends nothing).
        """
        if autoreset is Autoreset.SAME_STEP:
            raise ValueError("autoreset: first-ready steps take Autoreset.NONE or NEXT_STEP")
        rows = self.async_rows(indices)
        if write_actions is not None:
            write_actions(rows)
        broken = rows[self._needs_reset[rows]] if self._async_dirty else rows[:0]
        if broken.size:
            raise RuntimeError(
                f"sub-envs {broken.tolist()} failed or were interrupted in a command, so their "
                "states are unknown: reset them before stepping them"
            )
        modes: Any = STEP
        if autoreset is Autoreset.NEXT_STEP and self.any_finished:
            modes = np.where(self.finished[rows], RESET_NEXT, STEP).astype(np.uint8)
        self._async_send(rows, modes, None, _STEP)

    def async_reset_send(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        into: str = "root",
    ) -> None:
        """Reset the sub-envs at ``indices`` (all if None), each on its own, into the root
        or (``into="next"``) into "next" as a transition; ``seeds[k]`` seeds the ``k``-th of
        them (None: unseeded). ``async_recv`` takes them back as they finish."""
        if into not in ("root", "next"):
            raise ValueError(f"into: expected 'root' or 'next', got {into!r}")
        rows = self.async_rows(indices)
        if seeds is not None and len(seeds) != len(rows):
            raise ValueError(f"seeds: expected {len(rows)} seeds (one per index), got {len(seeds)}")
        if into == "root":
            self._async_send(rows, RESET, seeds, _RESET_ROOT)
        else:
            self._async_send(rows, RESET_NEXT, seeds, _RESET_NEXT)

    def async_recv(
        self,
        kind: str | None = None,
        min_get: int = 1,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Ready:
        """Wait until at least ``min_get`` of the sub-envs with a first-ready command of
        ``kind`` ("step", "reset", or None: either) in flight have finished, and take back
        those that have (at most ``max_get``, first finished first; the others stay for a
        later call).

        Raises a RuntimeError when none is in flight, ``TimeoutError`` past ``timeout``
        (nothing is lost: they come with a later call), and a sub-env's error (a
        ``WorkerError`` from a worker process, or for a dead worker): the sub-envs it concerns
        are out of flight and need a reset, the others stay in flight.
        """
        self.check_not_stuck()
        executor = self.executor
        if kind not in _RECV_KINDS:
            raise ValueError(f"kind: expected 'step', 'reset' or None, got {kind!r}")
        (low, high), what = _RECV_KINDS[kind]
        flight = self._flight
        rows = np.flatnonzero((flight >= low) & (flight <= high)).tolist()
        if not rows:
            raise RuntimeError(
                f"no first-ready {what} in flight: send one first (async_{kind or 'step'}_send)"
            )
        if not 1 <= min_get <= len(rows):
            raise ValueError(
                f"min_get: expected 1 to {len(rows)} (the sub-envs in flight), got {min_get}"
            )
        if max_get is not None and max_get < min_get:
            raise ValueError(f"max_get: expected at least min_get={min_get}, got {max_get}")
        own = timeout is None and self.timeout is not None  # the engine's timeout applies
        if own:
            timeout = self.timeout
        try:
            finished = executor.wait_some(rows, min_get, max_get, timeout)
        except TimeoutError as exc:
            self._timed_out(exc, own)
            raise  # still in flight: a later call takes them back (but after `own`)
        except BaseException:
            self._lose(executor.take_lost())
            raise
        indices = np.fromiter(finished, dtype=np.int64, count=len(finished))
        stepped = indices[self._flight[indices] == _STEP] if self._learning else None
        self._book_rows(indices)
        extras = {row: e for row, e in finished.items() if e is not None}
        if self._object_obs:
            self._store_objects(extras)
        if self._learning:
            self._learn_infos(extras, stepped, True)
        return Ready(indices, extras)

    @property
    def flying(self) -> np.ndarray:
        """The sub-envs with a first-ready command in flight (int64)."""
        return np.flatnonzero(self._flight).astype(np.int64)

    def _flying_rows(self) -> list[int]:
        return np.flatnonzero(self._flight).tolist()

    def async_rows(self, indices: Any) -> np.ndarray:
        """The sub-envs ``indices`` names (all if None) as an int64 array, checked: in range,
        each once, none in flight, and no whole-batch call in flight."""
        self.executor  # noqa: B018 (raises once closed; builds the sub-envs on first use)
        call = self._call
        if call is not None and call.interrupted:
            self._abandon()
        elif call is not None:
            raise RuntimeError(f"a {call.kind} is in flight: receive it first (recv())")
        if self._reset_required:  # an interrupted whole-batch command: every row is unknown
            self._needs_reset[:] = True
            self._reset_required = False
            self._async_dirty = True
        rows = self._checked_rows(indices)
        if self._flying:
            busy = rows[self._flight[rows] != _IDLE]
            if busy.size:
                raise ValueError(
                    f"sub-envs {busy.tolist()} are still in flight: receive their results "
                    "(async_recv) before sending them another command"
                )
        return rows

    def _checked_rows(self, indices: Any) -> np.ndarray:
        """``indices`` as int64 sub-env indices, each in range and named once."""
        n = self.num_envs
        if indices is None:
            return np.arange(n, dtype=np.int64)
        rows = np.asarray(indices)
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise ValueError(
                f"env_index: expected a 1-d array of sub-env indices (integers), got shape "
                f"{rows.shape} and dtype {rows.dtype}"
            )
        if rows.dtype != np.int64:
            rows = rows.astype(np.int64)
        if not rows.size:
            return rows
        listed = rows.tolist()  # a batch is small: Python's min/max/set beat numpy's calls
        if min(listed) < 0 or max(listed) >= n:
            outside = rows[(rows < 0) | (rows >= n)]
            raise IndexError(
                f"env_index: sub-env indices {outside.tolist()} out of range for {n} sub-envs"
            )
        if len(set(listed)) != len(listed):
            raise ValueError(f"env_index: each sub-env at most once, got {listed}")
        return rows

    def _async_send(
        self, rows: np.ndarray, modes: Any, seeds: Sequence[int | None] | None, kind: int
    ) -> None:
        self.check_not_stuck()
        control = self.control
        control.mode[rows] = modes
        self._uniform_mode = None
        if seeds is not None:
            for row, seed in zip(rows.tolist(), seeds):
                if seed is None:
                    continue
                if not _INT64.min <= seed <= _INT64.max:
                    raise ValueError(f"seed for sub-env {row}: expected an int64, got {seed}")
                control.seed[row] = seed
                control.mode[row] |= SEED
        if self._lane:  # first-ready results land in "next" itself
            control.lane[0] = 0
            self._lane = 0
        listed = rows.tolist()
        try:
            self._executor.send_some(listed)
            self._book_sent(rows, kind)
        except Exception:
            raise  # refused before anything was sent
        except BaseException:
            # Ctrl-C while the rows went out: all of them go, and all are booked, so that
            # none runs behind the books (and its results are received as any others)
            self._executor.resend_some(listed)
            self._book_sent(rows, kind, recount=True)
            raise

    def _book_sent(self, rows: np.ndarray, kind: int, recount: bool = False) -> None:
        self._flight[rows] = kind
        if recount:  # after an interrupt: whatever the count had reached
            self._flying = int(np.count_nonzero(self._flight))
        else:
            self._flying += len(rows)
        self._async_dirty = True

    def _book_rows(self, rows: np.ndarray) -> None:
        """Which of ``rows`` finished an episode, and whose root is older than "next", after
        their first-ready commands."""
        kinds = self._flight[rows]
        steps = rows[kinds == _STEP]
        if steps.size:
            self.finished[steps] = self.buffers.next.done[steps]
            self.root_stale[steps] = True
        resets = rows[kinds != _STEP]
        if resets.size:
            self.finished[resets] = False
            self.root_stale[resets] = kinds[kinds != _STEP] == _RESET_NEXT
            self._needs_reset[resets] = False
        self.any_finished = any_set(self.finished)
        self._flight[rows] = _IDLE
        self._flying -= len(rows)
        self._async_dirty = bool(self._flying) or any_set(self._needs_reset)

    def _lose(self, rows: list[int]) -> None:
        """Rows an error took out of flight: their states are unknown until a reset."""
        if not rows:
            return
        self._flying -= int(np.count_nonzero(self._flight[rows]))
        self._flight[rows] = _IDLE
        self._needs_reset[rows] = True
        self._async_dirty = True

    def _check_needs_reset(self, call: Call) -> None:
        """A whole-batch command after first-ready errors: a step needs every sub-env known;
        a reset makes those it resets known again."""
        broken = self._needs_reset
        if call.kind == "step" and broken.any():
            raise RuntimeError(
                f"sub-envs {np.flatnonzero(broken).tolist()} failed or were interrupted in a "
                "command, so their states are unknown: reset them before stepping"
            )
        if call.kind == "reset":
            broken[slice(None) if call.mask is None else call.mask] = False
        self._async_dirty = bool(self._flying) or any_set(broken)

    # ---- the round trip -------------------------------------------------------------------------
    def _ready(self) -> Executor:
        """The executor, once the call in flight (if any) is over."""
        self.check_not_stuck()
        executor = self.executor
        if self._call is not None and self._call.interrupted:
            self._abandon()
        if self._call is not None:
            raise RuntimeError(
                f"a {self._call.kind} is already in flight: receive it first (recv())"
            )
        if self._flying:
            raise RuntimeError(
                f"first-ready commands are in flight for sub-envs {self._flying_rows()}: "
                "receive them first (async_recv())"
            )
        return executor

    def _send(
        self, call: Call, modes: Any, seeds: Sequence[int | None] | None, handout: bool
    ) -> None:
        executor = self._executor
        if executor is None or self._call is not None or self._reset_required or self._async_dirty:
            executor = self._ready()
            if self._reset_required:
                self._check_resets_all(modes)
            if self._async_dirty:
                self._check_needs_reset(call)
        control = self.control
        # Step after step the same mode goes to every sub-env: the bytes already hold it.
        uniform = modes if type(modes) is int else None
        if type(modes) is bytes:  # one byte per sub-env: a memoryview takes them at C speed
            self._mode_bytes[:] = modes
        elif uniform is None or uniform != self._uniform_mode:
            control.mode[:] = modes
        self._uniform_mode = uniform
        into_lane = handout and self._has_lanes and self._lane_modes(uniform)  # before SEED bits
        if seeds is not None:
            self._write_seeds(seeds)
        lane = self.buffers.free_lane() if into_lane else 0
        if lane or self._lane:
            # Back to lane 0, the sub-envs first give it the observations they returned last
            # (not a copy of the lane: its array is the caller's, who may have written in it).
            control.lane[0] = lane
            self._lane = lane
        call.lane = lane
        try:
            executor.send(call)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted while posting: some workers run
                call.interrupted = True
                self._call = call
            raise
        self._call = call

    def _write_seeds(self, seeds: Sequence[int | None]) -> None:
        control = self.control
        for i, seed in enumerate(seeds):
            if seed is not None:
                if not _INT64.min <= seed <= _INT64.max:
                    raise ValueError(f"seed[{i}]: expected an int64, got {seed}")
                control.seed[i] = seed
                control.mode[i] |= SEED
                self._uniform_mode = None

    def _lane_modes(self, uniform: int | None) -> bool:
        """Whether the command in the control block can write "next"'s observations into an
        observation lane (see ``commands.LANE_MODES``)."""
        if uniform is not None:
            return uniform in LANE_MODES
        return set(self.control.mode.tobytes()) <= LANE_MODES

    def _wait(self, wait: Callable[[], Any]) -> Any:
        """Run ``wait`` for the call in flight; the call is over when it returns or raises a
        sub-env's error, stays in flight after a TimeoutError, and is marked interrupted
        after anything else (a KeyboardInterrupt)."""
        call = self._call
        try:
            result = wait()
        except TimeoutError:
            raise  # still in flight: a later receive resumes the wait
        except Exception:
            # A sub-env raised (or a worker died): every worker has answered or is gone, so
            # the call is over, and the engine takes the next one.
            self._call = None
            raise
        except BaseException:
            # An interrupt: worker processes run on, and a sub-env of this process may have
            # stopped mid-step. The next call first waits the workers out; after a command,
            # the sub-envs' states are then unknown, so it must reset them all.
            call.interrupted = True
            raise
        self._call = None
        self.timed_out = False
        return result

    def _abandon(self, timeout: float | None = None) -> None:
        """End an interrupted call: wait for the worker processes' answers and drop them (a
        dead worker still raises WorkerError); after a command, the next one must reset every
        sub-env. Interrupted again, or past ``timeout``, the call stays in flight."""
        call = self._call
        if call.kind != "request":
            self._reset_required = True
        try:
            self.executor.drain(call, timeout)
        except WorkerError:  # a worker died: the call is over all the same
            self._call = None
            raise
        self._call = None
        self.timed_out = False

    def _check_resets_all(self, modes: Any) -> None:
        resets = np.bitwise_and(np.asarray(modes, dtype=np.uint8), np.uint8(RESET))
        if not resets.all():
            raise RuntimeError(
                "a call was interrupted while its sub-envs ran, so their states are unknown: "
                "reset every sub-env (reset() without a mask) before anything else"
            )
        self._reset_required = False

    def _book(self, call: Call) -> None:
        """Which sub-envs finished, and whose root is older than "next", after ``call``."""
        if call.kind == "step":
            if call.autoreset is Autoreset.SAME_STEP:
                if self.any_finished:
                    self.finished[:] = False
                    self.any_finished = False
                if not call.current_root:
                    np.logical_not(self.buffers.next.done, out=self.root_stale)
            else:
                flags = self.buffers.next.done.tobytes()
                self._finished_bytes[:] = flags
                self.any_finished = b"\x01" in flags
                if not call.current_root:
                    self.root_stale.fill(True)
            if call.current_root:
                self.root_stale.fill(False)
            return
        mask = slice(None) if call.mask is None else call.mask
        self.finished[mask] = False
        self.any_finished = any_set(self.finished)
        if call.into == "root":
            self.root_stale.fill(False)
        else:
            self.root_stale[mask] = True

    def _store_objects(self, extras: dict[int, Extras]) -> None:
        """Object observations that worker processes sent back, into this process's lists."""
        root, next_ = self.buffers.root.objects, self.buffers.next.objects
        keys = self.layout.object_obs_keys
        for i in [i for i, e in extras.items() if e.objects is not None]:
            root_values, next_values = extras[i].objects
            extras[i].objects = None
            for key, root_value, next_value in zip(keys, root_values, next_values):
                root[key][i], next_[key][i] = root_value, next_value
            if extras[i].is_empty():
                del extras[i]

    # ---- lifetime -----------------------------------------------------------------------------
    def restart(self) -> None:
        """Close the sub-envs; they are built again (with the factories' current kwargs) on
        the next use."""
        executor, self._executor = self._executor, None
        self._call = None
        self._flight[:] = _IDLE
        self._flying = 0
        self._needs_reset[:] = False
        self._async_dirty = False
        if self._finalizer is not None:
            self._finalizer.detach()
        self._drop_kept()  # built with the kwargs of before
        if executor is not None:
            executor.close()

    def _drop_kept(self) -> None:
        """Close the env kept for sub-env 0 (see :meth:`first_env_kept`) if it was not taken."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.close()

    def close(self) -> None:
        """Close every sub-env, stop the workers and free the buffers. Closing twice is
        harmless; a sub-env's close error is raised after the rest is done."""
        if self.closed:
            return
        self.closed = True
        executor, self._executor = self._executor, None
        if self._finalizer is not None:
            self._finalizer.detach()
        try:
            self._drop_kept()
            if executor is not None:
                executor.close()  # a sub-env's close may raise: the memory goes all the same
        finally:
            self.backend.release()

    def __repr__(self) -> str:
        return (
            f"BatchEngine({self.backend.name}, num_envs={self.num_envs}, "
            f"num_workers={self.num_workers})"
        )


def _shutdown(executor: Executor, release: Callable[[], None], owner_pid: int) -> None:
    # A forked process inherits the engine, garbage or not: its collector may free it there
    # too, but the workers and the memory are the owner's to end.
    if os.getpid() != owner_pid:
        return
    executor.close()
    release()


def _union_leaves(leaves_per_env: list[list[LeafSpec]], name: str) -> list[LeafSpec]:
    """Every leaf of every sub-env, once; a key with two shapes or dtypes is an error."""
    union: dict[tuple, LeafSpec] = {}
    for leaves in leaves_per_env:
        for leaf in leaves:
            known = union.setdefault(leaf[0], leaf)
            if known != leaf:
                raise SpaceMismatchError(
                    f"{name}: key {leaf[0]} is {known[1:]} in one task and {leaf[1:]} in another"
                )
    for key in union:
        for other in union:
            if len(other) > len(key) and other[: len(key)] == key:
                raise SpaceMismatchError(
                    f"{name}: key {key} is a value in one task and holds {other} in another"
                )
    return list(union.values())
