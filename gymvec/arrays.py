"""Numpy checks for the per-step hot paths (torch-free: worker processes import it).

A numpy reduction called from Python costs microseconds on small arrays; these do the same
with cheaper operations.
"""

from __future__ import annotations

import numpy as np


def any_set(flags: np.ndarray) -> bool:
    """``flags.any()`` for a bool array, by a byte search instead of a reduction."""
    return b"\x01" in flags.tobytes()


def all_below(values: np.ndarray, n: int) -> bool:
    """Whether every int64 value lies in ``[0, n)``, with one reduction: seen as unsigned,
    negative values wrap to huge ones, so the maximum alone checks both ends."""
    return int(np.maximum.reduce(values.view(np.uint64), axis=None)) < n
