"""First-ready commands: some sub-envs at a time, taken back as they finish.

:class:`FirstReady` is the engine's bookkeeping of them: what each sub-env has in flight (a
step, a reset into the root or into "next"), which sub-envs an error or an interrupt left in
an unknown state, and the verbs ``step_send``/``reset_send``/``recv`` that the engine
exposes as ``async_step_send``/``async_reset_send``/``async_recv``. It is given the engine's
parts (the executor's slot, the call in flight, the books, the control block and buffers),
never the engine; it hands the rows to ``Executor.send_some``/``wait_some`` and books what
comes back with ``Books.update``, as the whole-batch receive does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.common.arrays import any_set
from gymvec.engine.books import Books
from gymvec.engine.info_learning import InfoLearner
from gymvec.engine.life import CallLife
from gymvec.engine.slot import ExecutorSlot
from gymvec.wire.buffers import Buffers, LaneChoice
from gymvec.wire.calls import Command, Into, Ready, Take
from gymvec.wire.commands import RESET, RESET_NEXT, SEED, Control, step_modes

_INT64 = np.iinfo(np.int64)

# What a sub-env has in flight
IDLE, STEP, RESET_ROOT, RESET_INTO_NEXT = 0, 1, 2, 3
# What each kind of receive takes: the flight codes in [low, high], and its name
_RECV_KINDS = {
    None: ((STEP, RESET_INTO_NEXT), "command"),
    "step": ((STEP, STEP), "step"),
    "reset": ((RESET_ROOT, RESET_INTO_NEXT), "reset"),
}
# What the books are told each kind of first-ready command was (see Books.update)
_BOOKED = {
    STEP: Command("step", AutoresetMode.NEXT_STEP),
    RESET_ROOT: Command("reset", into="root"),
    RESET_INTO_NEXT: Command("reset", into="next"),
}


class FirstReady:
    """The first-ready half of a :class:`~gymvec.engine.BatchEngine` (see the module).

    Args:
        slot, life, books, buffers, control, lanes, learner: the engine's parts, which stay
            the same objects.
        object_obs: whether the observations have object leaves.
        unit_size: the rows a command sends together (a block's size; 1 without blocks, 0
            where blocks of several sizes, which first-ready commands refuse).
    """

    def __init__(
        self,
        slot: ExecutorSlot,
        life: CallLife,
        books: Books,
        buffers: Buffers,
        control: Control,
        lanes: LaneChoice,
        learner: InfoLearner,
        object_obs: bool,
        unit_size: int = 1,
    ):
        self.slot, self.life, self.books = slot, life, books
        self.buffers, self.control = buffers, control
        self.lanes, self.learner = lanes, learner
        self.object_obs = object_obs
        n = self.num_envs = len(books.finished)
        self.flight = np.zeros(n, dtype=np.int8)  # IDLE, STEP, ... per sub-env
        self.flying = 0  # how many are in flight
        self.needs_reset = np.zeros(n, dtype=bool)  # states an error or interrupt left unknown
        self.dirty = False  # some sub-env is in flight or needs a reset
        self.unit_size = unit_size
        self.healing: Any = None  # the engine's Healing under on_fault restarting (set by it)

    def clear(self) -> None:
        """Nothing is in flight any more (the sub-envs were closed)."""
        self.flight[:] = IDLE
        self.flying = 0
        self.needs_reset[:] = False
        self.dirty = False

    @property
    def flying_rows(self) -> np.ndarray:
        """The sub-envs with a first-ready command in flight (int64)."""
        return np.flatnonzero(self.flight).astype(np.int64)

    # ---- verbs --------------------------------------------------------------------------------
    def step_send(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        *,
        write_actions: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        """Step the sub-envs at ``indices`` (all if None) with their rows of
        ``buffers.action``, each on its own: ``async_recv`` takes them back as they finish.

        ``autoreset``: DISABLED, or NEXT_STEP (a sub-env that finished at its previous step is
        reset into "next" instead, as a transition). A sub-env still in flight raises a
        ValueError naming it; nothing is sent then. ``write_actions(rows)``: called with the
        checked rows (int64) before anything is sent, to write their actions (an error there
        sends nothing).
        """
        if autoreset is AutoresetMode.SAME_STEP:
            raise ValueError(
                "autoreset: first-ready steps take AutoresetMode.DISABLED or NEXT_STEP"
            )
        rows = self.rows(indices)
        if write_actions is not None:
            write_actions(rows)
        broken = rows[self.needs_reset[rows]] if self.dirty else rows[:0]
        if broken.size:
            raise RuntimeError(
                f"sub-envs {broken.tolist()} failed or were interrupted in a command, so their "
                "states are unknown: reset them before stepping them"
            )
        books = self.books
        modes = step_modes(autoreset, books.finished[rows], books.any_finished)
        if type(modes) is bytes:
            modes = np.frombuffer(modes, dtype=np.uint8)
        seeds = None
        if self.healing is not None and self.healing.reseeds:  # rebuilt sub-envs to reset
            resetting = (np.broadcast_to(modes, rows.shape) & RESET).astype(bool).tolist()
            seeds = self.healing.first_ready_seeds(rows.tolist(), resetting, None)
        self._send(rows, modes, seeds, STEP)

    def reset_send(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        into: Into = "root",
    ) -> None:
        """Reset the sub-envs at ``indices`` (all if None), each on its own, into the root
        or (``into="next"``) into "next" as a transition; ``seeds[k]`` seeds the ``k``-th of
        them (None: unseeded). ``async_recv`` takes them back as they finish."""
        if into not in ("root", "next"):
            raise ValueError(f"into: expected 'root' or 'next', got {into!r}")
        rows = self.rows(indices)
        if seeds is not None and len(seeds) != len(rows):
            raise ValueError(f"seeds: expected {len(rows)} seeds (one per index), got {len(seeds)}")
        if self.healing is not None:
            seeds = self.healing.first_ready_seeds(rows.tolist(), [True] * len(rows), seeds)
        if into == "root":
            self._send(rows, RESET, seeds, RESET_ROOT)
        else:
            self._send(rows, RESET_NEXT, seeds, RESET_INTO_NEXT)

    def recv(
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
        life = self.life
        life.check_not_stuck()
        executor = self.slot.executor
        if kind not in _RECV_KINDS:
            raise ValueError(f"kind: expected 'step', 'reset' or None, got {kind!r}")
        (low, high), what = _RECV_KINDS[kind]
        flight = self.flight
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
        take = Take(rows, min_get, max_get, life.wait_timeout(timeout), life.timeout)
        try:
            try:
                finished = executor.wait_some(take)
            except TimeoutError:
                if not self._hangs_heal(timeout):
                    raise
                finished = executor.wait_some(take)  # (resumed: the hung rows are faults)
        except TimeoutError as exc:
            life.wait_failed(exc, timeout)
            raise  # still in flight: a later call takes them back
        except BaseException:
            self._lose(executor.take_lost())
            raise
        faults = None
        if self.healing is not None:
            finished, faults = self._heal(finished)
            if len(finished) < min_get:  # resets sent again: wait for the rest
                left = None if max_get is None else max_get - len(finished)
                more = self.recv(kind, min_get - len(finished), left, timeout)
                return _joined(self._received(executor, finished, faults), more)
        return self._received(executor, finished, faults)

    def _hangs_heal(self, timeout: float | None) -> bool:
        """A wait timed out: where it was the engine's ``timeout`` (the caller gave none) and
        hangs heal, the hung workers were started again (True: wait again)."""
        healing, engine_timeout = self.healing, self.life.timeout
        if timeout is not None or healing is None or not healing.heals_hangs:
            return False
        return engine_timeout is not None and self.slot.executor.end_busy(engine_timeout)

    def _received(
        self, executor: Any, finished: dict[int, Any], faults: dict[int, str] | None
    ) -> Ready:
        """Book the rows that came back (``finished``: by row, their extras or None)."""
        indices = np.fromiter(finished, dtype=np.int64, count=len(finished))
        learner = self.learner
        stepped = indices[self.flight[indices] == STEP] if learner.active else None
        self._book_rows(indices)
        extras = {row: e for row, e in finished.items() if e is not None}
        if self.object_obs:
            self.buffers.store_objects(extras)
        places = learner.learn(extras, stepped) if learner.active else None
        if places and not executor.add_info_fields_in_flight(places):
            learner.active = False  # this executor cannot: the entries stay extras
            places = None
        if places:
            self.buffers.add_info_fields(places)  # (done already where groups share them)
        return Ready(indices, extras, faults)

    def _heal(self, finished: dict[int, Any]) -> tuple[dict[int, Any], dict[int, str] | None]:
        """The faults among ``finished`` (rebuilt where they live), booked: a step's row reads
        as truncated (its messages returned); a reset is sent again on the rebuilt sub-env
        and its row taken out of ``finished`` (it comes back later)."""
        faulted = [r for r, e in finished.items() if e is not None and e.fault is not None]
        if not faulted:
            return finished, None
        healing, flight = self.healing, self.flight
        steps = {r: finished[r] for r in faulted if flight[r] == STEP}
        faults = healing.faults_of(_BOOKED[STEP], steps) if steps else None
        for code in (RESET_ROOT, RESET_INTO_NEXT):
            rows = [r for r in faulted if flight[r] == code]
            if not rows:
                continue
            healing.faults_of(_BOOKED[code], {r: finished.pop(r) for r in rows})
            again = np.array(rows, dtype=np.int64)
            self.flight[again] = IDLE
            self.flying -= len(rows)
            seeds = healing.first_ready_seeds(rows, [True] * len(rows), None)
            self._send(again, RESET if code == RESET_ROOT else RESET_NEXT, seeds, code)
        return finished, faults

    # ---- rows and books -----------------------------------------------------------------------
    def rows(self, indices: Any) -> np.ndarray:
        """The sub-envs ``indices`` names (all if None) as an int64 array, checked: in range,
        each once, none in flight, and no whole-batch call in flight."""
        life = self.life
        life.clear(self.slot.executor)  # (raises once closed; builds the sub-envs on first use)
        if life.reset_required:  # an interrupted whole-batch command: every row is unknown
            self.needs_reset[:] = True
            life.reset_required = False
            self.dirty = True
        rows = checked_rows(indices, self.num_envs)
        if self.unit_size != 1:
            check_whole_units(rows, self.unit_size)
        if self.flying:
            busy = rows[self.flight[rows] != IDLE]
            if busy.size:
                raise ValueError(
                    f"sub-envs {busy.tolist()} are still in flight: receive their results "
                    "(async_recv) before sending them another command"
                )
        return rows

    def _send(
        self, rows: np.ndarray, modes: Any, seeds: Sequence[int | None] | None, kind: int
    ) -> None:
        self.life.check_not_stuck()
        control = self.control
        control.mode[rows] = modes
        self.books.uniform_mode = None  # (the bytes differ now)
        if seeds is not None:
            for row, seed in zip(rows.tolist(), seeds):
                if seed is None:
                    continue
                if not _INT64.min <= seed <= _INT64.max:
                    raise ValueError(f"seed for sub-env {row}: expected an int64, got {seed}")
                control.seed[row] = seed
                control.mode[row] |= SEED
        self.lanes.choose(False)  # first-ready results land in "next" itself
        listed = rows.tolist()
        executor = self.slot.executor
        try:
            executor.send_some(listed)
            self._book_sent(rows, kind)
        except Exception:
            raise  # refused before anything was sent
        except BaseException:
            # Ctrl-C while the rows went out: all of them go, and all are booked, so that
            # none runs behind the books (and its results are received as any others)
            executor.resend_some(listed)
            self._book_sent(rows, kind, recount=True)
            raise

    def _book_sent(self, rows: np.ndarray, kind: int, recount: bool = False) -> None:
        self.flight[rows] = kind
        if recount:  # after an interrupt: whatever the count had reached
            self.flying = int(np.count_nonzero(self.flight))
        else:
            self.flying += len(rows)
        self.dirty = True

    def _book_rows(self, rows: np.ndarray) -> None:
        """Which of ``rows`` finished an episode, and whose root is older than "next", after
        their first-ready commands."""
        kinds = self.flight[rows]
        for kind, command in _BOOKED.items():
            of_kind = rows[kinds == kind]
            if of_kind.size:
                self.books.update(command, of_kind)
        self.needs_reset[rows[kinds != STEP]] = False
        self.flight[rows] = IDLE
        self.flying -= len(rows)
        self.dirty = bool(self.flying) or any_set(self.needs_reset)

    def _lose(self, rows: list[int]) -> None:
        """Rows an error took out of flight: their states are unknown until a reset."""
        if not rows:
            return
        self.flying -= int(np.count_nonzero(self.flight[rows]))
        self.flight[rows] = IDLE
        self.needs_reset[rows] = True
        self.dirty = True

    def check_whole_batch(self, command: Command) -> None:
        """Before a whole-batch command: none may be in flight; a step needs every sub-env
        known, and a reset makes those it resets known again."""
        if self.flying:
            raise RuntimeError(
                f"first-ready commands are in flight for sub-envs "
                f"{self.flying_rows.tolist()}: receive them first (async_recv())"
            )
        broken = self.needs_reset
        if command.kind == "step" and broken.any():
            raise RuntimeError(
                f"sub-envs {np.flatnonzero(broken).tolist()} failed or were interrupted in a "
                "command, so their states are unknown: reset them before stepping"
            )
        if command.kind == "reset":
            broken[slice(None) if command.mask is None else command.mask] = False
        self.dirty = any_set(broken)

    def check_none_flying(self) -> None:
        """Before a request: no first-ready command may be in flight."""
        if self.flying:
            raise RuntimeError(
                f"first-ready commands are in flight for sub-envs "
                f"{self.flying_rows.tolist()}: receive them first (async_recv())"
            )


def _joined(first: Ready, then: Ready) -> Ready:
    """Two receives' rows as one (``then`` after ``first``)."""
    faults = {**(first.faults or {}), **(then.faults or {})} or None
    indices = np.concatenate([first.indices, then.indices])
    return Ready(indices, {**first.extras, **then.extras}, faults)


def check_whole_units(rows: np.ndarray, size: int) -> None:
    """A ValueError unless ``rows`` are whole blocks of ``size`` rows (``[k * size, (k + 1) *
    size)``): a block's rows are sent and come back together (``size`` 0: sub-envs of
    several sizes, which first-ready commands do not take)."""
    if size == 0:
        raise ValueError(
            "first-ready commands over blocks need blocks of one size (and no single envs "
            "beside them): this batch mixes sizes"
        )
    firsts, counts = np.unique(rows // size, return_counts=True)
    split = firsts[counts != size]
    if split.size:
        block = int(split[0])
        raise ValueError(
            f"env_index: rows {block * size}..{(block + 1) * size - 1} form one block, sent "
            f"and received together; got {int(counts[counts != size][0])} of its {size} rows"
        )


def checked_rows(indices: Any, n: int) -> np.ndarray:
    """``indices`` as int64 sub-env indices, each in range and named once."""
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
