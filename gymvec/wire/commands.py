"""The command protocol between the engine and the sub-envs' drivers, in one place.

A command is one byte per sub-env (a :class:`Mode` combination) plus a seed per sub-env and
the observation lane, all in the shared control block. The engine (``engine.py``) turns its
verbs into these bytes; the drivers (``drivers.py``) carry them out. Nothing else reads or
writes them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.wire.buffers import as_buffer


class Mode(enum.IntFlag):
    """What a sub-env does in one command (combinable)."""

    STEP = 1  # step with the action in the buffers; the transition goes to "next"
    RESET = 2  # reset; the result goes to the root (or to "next" with RESET_INTO_NEXT)
    AUTORESET = 4  # with STEP: if the sub-env finished, reset it into the root
    SYNC_ROOT = 8  # root <- next for a sub-env that was not reset into the root (but the
    # observations, in a command into an observation lane: the lane holds them)
    RESET_INTO_NEXT = 16  # resets write "next": reset obs and info, reward 0, flags False
    SEED = 32  # RESET uses the seed in the control block
    KEEP_FINAL_OBS = 64  # with AUTORESET: a finished sub-env's last observation, as it returned
    # it, goes back with the answer where the buffer row the step wrote ("next"'s own, or the
    # observation lane's) does not hold it exactly
    # (gymnasium's SAME_STEP hands that object out; see drivers.final_obs_to_keep)


# Plain ints for the hot loops: IntFlag arithmetic costs microseconds per operation.
STEP, RESET, AUTORESET = int(Mode.STEP), int(Mode.RESET), int(Mode.AUTORESET)
SYNC_ROOT, RESET_INTO_NEXT, SEED = int(Mode.SYNC_ROOT), int(Mode.RESET_INTO_NEXT), int(Mode.SEED)
KEEP_FINAL_OBS = int(Mode.KEEP_FINAL_OBS)
RESET_NEXT = RESET | RESET_INTO_NEXT
_INT64 = np.iinfo(np.int64)

# SAME_STEP's modes, whichever front end steps: the finished sub-envs reset into the root, with
# their last observation kept, and the root of the others brought up to date, so that after
# the step the root holds every sub-env's current observation (in a step into an observation
# lane, the lane holds those of the others) and "next" every transition.
SAME_STEP_MODES = STEP | AUTORESET | KEEP_FINAL_OBS | SYNC_ROOT

# The modes of a command whose observations may go to an observation lane: each writes its
# sub-env's "next" observation (so the lane holds the whole batch after it); a SYNC_ROOT
# among them leaves the root's observations to the lane (see ``CommandRunner.sync_root``).
LANE_MODES = frozenset((STEP, SAME_STEP_MODES, RESET_NEXT))
_LANE_BYTES = bytes(sorted(LANE_MODES))

# NEXT_STEP's modes from the bytes of the finished flags: False -> step, True -> reset
STEP_OR_RESET_NEXT = bytes([STEP, RESET_NEXT]) + bytes(254)
ARITHMETIC_MODES_MIN = 4096  # sub-envs from which numpy makes those modes faster than bytes


# The modes of a command, as the engine writes them into the control block: one mode for
# every sub-env (int), one byte per sub-env (bytes), or one per row (a uint8 array).
Modes = Union[int, bytes, np.ndarray]  # noqa: UP007


def step_modes(autoreset: AutoresetMode, finished: np.ndarray, any_finished: bool) -> Modes:
    """The autoreset planner: the modes of a step of the sub-envs whose ``finished`` flags
    are given (every sub-env, or the rows of a first-ready step), under gymnasium's
    ``autoreset`` mode, the one autoreset enum of gymvec (see ``BatchEngine.step_send``).

    DISABLED steps every sub-env: the finished ones stay finished until a reset (also the
    tensordict ``EnvBase.step``, which resets nothing). NEXT_STEP resets the finished sub-envs
    into "next" instead of stepping them, the reset as this step's transition (reward 0, flags
    False), as gymnasium reports it. SAME_STEP has every sub-env that finishes reset itself
    into the root within the step, its last observation kept (``SAME_STEP_MODES``): "next"
    keeps every transition and the root ends up current (also ``step_and_maybe_reset``).
    Every path that steps sub-envs asks this, so a policy means the same bytes everywhere.
    """
    if autoreset is AutoresetMode.SAME_STEP:
        return SAME_STEP_MODES
    if autoreset is AutoresetMode.NEXT_STEP and any_finished:
        # the finished sub-envs reset, the others step: a byte translation of the flags, or
        # in large batches two numpy passes (translate takes about 0.4 ns a byte)
        if finished.size < ARITHMETIC_MODES_MIN:
            return finished.tobytes().translate(STEP_OR_RESET_NEXT)
        modes = finished.view(np.uint8) * np.uint8(RESET_NEXT - STEP)
        modes += np.uint8(STEP)
        return modes
    return STEP


def ignores_finished_actions(autoreset: AutoresetMode) -> bool:
    """Whether a step under ``autoreset`` leaves the actions of the finished sub-envs
    unused (NEXT_STEP resets them instead, DISABLED refuses to step them; SAME_STEP steps
    them).
    Front ends ask once and skip those actions' checks."""
    return autoreset is not AutoresetMode.SAME_STEP


class Control:
    """A command's arguments in shared memory: per sub-env a ``mode`` (uint8) and a ``seed``
    (int64), and the observation ``lane`` (int64, see ``BufferLayout``) that "next"'s
    observations go to."""

    def __init__(self, num_envs: int, memory: Any):
        flat = np.frombuffer(as_buffer(memory), dtype=np.uint8, count=Control.nbytes(num_envs))
        self.lane = flat[:8].view(np.int64)
        self.seed = flat[8 : 8 + 8 * num_envs].view(np.int64)
        self.mode = flat[8 + 8 * num_envs : 8 + 9 * num_envs]

    @staticmethod
    def nbytes(num_envs: int) -> int:
        return 8 + 9 * num_envs

    def write_seeds(self, seeds: Sequence[int | None]) -> bool:
        """Seed the resets of sub-env ``i`` with ``seeds[i]`` (None: unseeded); returns
        whether any seed was written (the mode bytes then differ)."""
        written = False
        for i, seed in enumerate(seeds):
            if seed is not None:
                if not _INT64.min <= seed <= _INT64.max:
                    raise ValueError(f"seed[{i}]: expected an int64, got {seed}")
                self.seed[i] = seed
                self.mode[i] |= SEED
                written = True
        return written


def lane_modes(control: Control, uniform: int | None, kind: str = "") -> bool:
    """Whether the command in the control block (of ``kind``, whose modes are all
    ``uniform``, where not None) can write "next"'s observations into an observation lane
    (see ``LANE_MODES``). A step's can: its modes are the autoreset planner's, lane modes."""
    if kind == "step":
        return True
    if uniform is not None:
        return uniform in LANE_MODES
    return not control.mode.tobytes().translate(None, _LANE_BYTES)  # (a C pass, not a set)


class _Nothing:
    """The value of a field that holds nothing (None can be a sub-env's observation)."""

    def __repr__(self) -> str:
        return "NOTHING"

    def __reduce__(self) -> str:
        return "NOTHING"  # the module's one instance, also after pickling


NOTHING: Any = _Nothing()


@dataclass(slots=True)
class Extras:
    """What one sub-env reported in one command beside the buffers.

    ``root``/``next``: the entries of the info it returned that have no buffer field (see
    ``common.infos``), for the info of a reset into the root and for the info of a step (or
    of a reset into "next"). ``final_obs``: with KEEP_FINAL_OBS, the last observation of a
    sub-env the step reset, as the sub-env returned it, unless the buffer row the step wrote
    ("next"'s own, or the observation lane's) holds it exactly, where it is left. ``objects``: the
    values of object observation leaves (see ``BufferLayout``) that a worker process sends
    back, ``(root values, next values)``; the engine stores them and clears the field.
    ``fault``: with ``on_fault`` restarting, the sub-env raised in this command and was
    rebuilt where it lives: ``(kind, message, traceback)`` (see ``common.faults.Fault``).
    """

    root: dict | None = None
    next: dict | None = None
    final_obs: Any = NOTHING
    objects: tuple | None = None
    fault: tuple | None = None

    def is_empty(self) -> bool:
        return (
            self.root is None
            and self.next is None
            and self.final_obs is NOTHING
            and self.objects is None
            and self.fault is None
        )
