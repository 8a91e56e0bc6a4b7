"""``wire/commands.py``: the autoreset planner, the one place a policy becomes mode bytes."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from gymvec.wire.commands import (
    ARITHMETIC_MODES_MIN,
    AUTORESET,
    KEEP_FINAL_OBS,
    RESET_NEXT,
    SAME_STEP_MODES,
    STEP,
    SYNC_ROOT,
    ignores_finished_actions,
    step_modes,
)

FINISHED = np.array([False, True, False, True])


def _per_row(modes, n: int = len(FINISHED)) -> list[int]:
    """The mode byte of each row, whatever form the planner returned (one byte for all,
    or bytes per row)."""
    if isinstance(modes, bytes | bytearray):
        return list(modes)
    if isinstance(modes, np.ndarray):
        assert modes.dtype == np.uint8 and modes.shape == (n,)
        return modes.tolist()
    return [int(modes)] * n


def test_none_steps_every_row_finished_or_not() -> None:
    assert _per_row(step_modes(AutoresetMode.DISABLED, FINISHED, True)) == [STEP] * 4


def test_next_step_resets_the_finished_rows_into_next_instead_of_stepping_them() -> None:
    modes = _per_row(step_modes(AutoresetMode.NEXT_STEP, FINISHED, True))
    assert modes == [STEP, RESET_NEXT, STEP, RESET_NEXT]
    # nothing finished: one byte for all, no per-row translation
    assert step_modes(AutoresetMode.NEXT_STEP, np.zeros(4, bool), False) == STEP


@pytest.mark.parametrize("n", [ARITHMETIC_MODES_MIN - 1, ARITHMETIC_MODES_MIN, 20000])
def test_next_step_modes_of_large_batches_are_the_same_bytes(n: int) -> None:
    # (from ARITHMETIC_MODES_MIN rows on, numpy arithmetic makes them, not bytes.translate)
    finished = np.random.default_rng(n).random(n) < 0.1
    modes = _per_row(step_modes(AutoresetMode.NEXT_STEP, finished, True), n)
    assert modes == [RESET_NEXT if f else STEP for f in finished.tolist()]
    rows = np.flatnonzero(np.arange(n) % 3 == 0)  # a first-ready step's rows (a copy)
    modes = _per_row(step_modes(AutoresetMode.NEXT_STEP, finished[rows], True), len(rows))
    assert modes == [RESET_NEXT if f else STEP for f in finished[rows].tolist()]


def test_same_step_has_every_row_reset_itself_and_bring_the_root_current() -> None:
    modes = step_modes(AutoresetMode.SAME_STEP, FINISHED, True)
    assert modes == SAME_STEP_MODES
    assert SAME_STEP_MODES == STEP | AUTORESET | KEEP_FINAL_OBS | SYNC_ROOT
    assert step_modes(AutoresetMode.SAME_STEP, np.zeros(4, bool), False) == SAME_STEP_MODES


@pytest.mark.parametrize(
    ("autoreset", "ignores"),
    [
        (AutoresetMode.DISABLED, True),
        (AutoresetMode.NEXT_STEP, True),
        (AutoresetMode.SAME_STEP, False),
    ],
)
def test_whose_actions_a_step_leaves_unused(autoreset: AutoresetMode, ignores: bool) -> None:
    assert ignores_finished_actions(autoreset) is ignores
