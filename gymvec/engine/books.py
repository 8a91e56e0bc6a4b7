"""The engine's books: what it knows of its sub-envs between calls, kept in one place.

:class:`Books` holds which sub-envs finished an episode since their last reset, whose root is
older than "next", and the mode every control byte holds (when one does). Whole-batch and
first-ready receives both book their results through :meth:`Books.update`.
"""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.common.arrays import any_set
from gymvec.wire.buffers import Buffers
from gymvec.wire.calls import Command


class Books:
    """The books of a batch of ``num_envs`` sub-envs over ``buffers``.

    ``finished``: episode over, not reset since (NEXT_STEP resets them at the next step);
    ``any_finished``: whether one is. ``root_stale``: the root is older than "next" (a reset
    into the root brings it up to date). ``uniform_mode``: the mode every control byte holds,
    if known (a send writes the bytes only when they change; whoever writes other bytes sets
    it to None).
    """

    def __init__(self, num_envs: int, buffers: Buffers):
        self.done = buffers.next.done
        self.finished = np.zeros(num_envs, dtype=bool)
        self._finished_bytes = self.finished.view(np.uint8).data  # (written each step)
        self.any_finished = False
        self.root_stale = np.zeros(num_envs, dtype=bool)
        self.uniform_mode: int | None = None

    def update(self, command: Command, rows: np.ndarray | None = None) -> None:
        """``command`` ended: for every sub-env (``command.mask``'s for a reset), or, for a
        first-ready command, for ``rows``."""
        finished, root_stale = self.finished, self.root_stale
        if command.kind == "step":
            if rows is not None:
                finished[rows] = self.done[rows]
                root_stale[rows] = True
            elif command.autoreset is AutoresetMode.SAME_STEP:  # (its modes sync every root)
                if self.any_finished:
                    finished[:] = False
                    self.any_finished = False
                if command.lane:  # but the observations, which stay in the lane
                    np.logical_not(self.done, out=root_stale)
                else:
                    root_stale.fill(False)
                return
            else:
                flags = self.done.tobytes()
                self._finished_bytes[:] = flags
                self.any_finished = b"\x01" in flags
                root_stale.fill(True)
                return
        else:
            whole = rows is None
            where = (slice(None) if command.mask is None else command.mask) if whole else rows
            finished[where] = False
            if whole and command.into == "root":  # its modes sync the other roots too
                root_stale.fill(False)
            else:
                root_stale[where] = command.into == "next"
        self.any_finished = any_set(finished)
