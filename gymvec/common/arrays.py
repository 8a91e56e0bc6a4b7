"""Numpy checks for the per-step hot paths (torch-free: worker processes import it).

A numpy reduction called from Python costs microseconds on small arrays, and several more
once a step of the sub-envs has evicted numpy's code from the caches; these do the same with
cheaper operations.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

BIG_INT_LIMIT = 4096  # values; beyond, one numpy reduction costs less than a huge Python int
_SETTLING_BYTES = 4 << 20  # settle_allocator's block: temporaries up to 4 MiB stay in the heap
_COLUMNS_LIMIT = 16  # columns of a Fortran-ordered batch that copy_batch copies one by one


def copy_batch(target: np.ndarray, value: np.ndarray) -> None:
    """``target[...] = value`` (a C-ordered batch of rows). A Fortran-ordered 2-D ``value`` of
    a few columns (numpy vector envs return ``state.T``, CartPoleVectorEnv among them) goes
    column by column: numpy's own copy of it runs at half that speed."""
    if (
        value.ndim == 2
        and value.shape[1] <= _COLUMNS_LIMIT
        and value.flags.f_contiguous
        and not value.flags.c_contiguous
    ):
        for k in range(value.shape[1]):
            target[:, k] = value[:, k]
    else:
        target[...] = value


def settle_allocator() -> None:
    """Raise glibc's mmap and trim thresholds in this process the way glibc does itself after
    the first free of a large block (mallopt(3), M_MMAP_THRESHOLD: "dynamic"): by freeing one.

    Until a process has freed a block above 128 KiB, glibc gives the heap's free top back to
    the system past 128 KiB and maps larger blocks anew on each allocation, so a numpy env
    whose step makes and drops temporaries of that size faults their pages in again every
    step: about 40 page faults a step, a quarter of its time, for CartPoleVectorEnv of 8,192
    rows in a freshly forked process. Whether a process is past that depends on what it did
    before (what it imported, say); with this its steps cost the same either way. Nothing is
    touched (numpy asks for the block without writing it), no setting is fixed, and elsewhere
    than glibc a large block alloc and free is all it does."""
    np.empty(_SETTLING_BYTES, np.uint8)


def any_set(flags: np.ndarray) -> bool:
    """``flags.any()`` for a bool array, by a byte search instead of a reduction."""
    return b"\x01" in flags.tobytes()


def all_set(flags: Any) -> bool:
    """``flags.all()`` for a bool array, by a byte search instead of a reduction (False for
    anything else: a caller then takes its general path)."""
    if not isinstance(flags, np.ndarray) or flags.dtype != np.bool_:
        return False
    return b"\x00" not in flags.tobytes()


@functools.lru_cache(maxsize=64)
def word_masks(n: int, count: int) -> tuple[int, int]:
    """(bits k..63 of every word, 2**k - n in every word) for ``count`` int64 words, where
    ``2**k`` is the smallest power of two >= n; as Python ints laid out like the words."""
    k = max(n - 1, 1).bit_length()
    high = np.full(count, ~np.uint64((1 << k) - 1), dtype=np.uint64)
    offset = np.full(count, (1 << k) - n, dtype=np.uint64)
    return (
        int.from_bytes(high.tobytes(), sys.byteorder),
        int.from_bytes(offset.tobytes(), sys.byteorder),
    )


def all_below(values: np.ndarray, n: int) -> bool:
    """Whether every int64 value lies in ``[0, n)``.

    The values are read as one Python int in which each value is a 64-bit field: a value
    outside ``[0, 2**k)`` has a bit at or above k set (negative ones all the high bits), and
    adding ``2**k - n`` to a value below ``2**k`` sets such a bit exactly when it is >= n,
    without carrying into the next field. Two big-int operations cost less than one numpy
    reduction on the small arrays of a step.
    """
    if values.size > BIG_INT_LIMIT or n > 1 << 62:
        return int(np.maximum.reduce(values.view(np.uint64), axis=None)) < n
    data = values.tobytes()
    high, offset = word_masks(n, len(data) // 8)
    x = int.from_bytes(data, sys.byteorder)
    return not (x & high or (x + offset) & high)


def below_words(n: int, count: int) -> tuple[int, int] | None:
    """``all_below``'s masks for arrays of ``count`` int64 values below ``n``, for the hot
    paths that apply them inline (``x = int.from_bytes(values.tobytes(), sys.byteorder)``,
    in range unless ``x & high or (x + offset) & high``); None where a numpy reduction costs
    less (many values, or a huge ``n``)."""
    if count > BIG_INT_LIMIT or n > 1 << 62:
        return None
    return word_masks(n, count)


def below_check(n: int, count: int) -> Callable[[np.ndarray], bool]:
    """``all_below(values, n)`` for arrays of ``count`` int64 values, with the masks made
    once: the check of every step's whole batch of actions (other sizes take ``all_below``)."""
    words = below_words(n, count)
    if words is None:
        return functools.partial(all_below, n=n)
    high, offset = words
    from_bytes, order = int.from_bytes, sys.byteorder

    def check(values: np.ndarray) -> bool:
        if values.size != count:
            return all_below(values, n)
        x = from_bytes(values.tobytes(), order)
        return not (x & high or (x + offset) & high)

    return check
