"""``never_raises``: the ``__repr__`` of an env whose constructor may have failed partway.

Python shows such a half-built object in tracebacks (pytest prints ``self = repr(self)`` for
the frame of the failing ``__init__``); a repr that reads an attribute never set would replace
that line with ``AttributeError``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def never_raises(repr_method: Callable[[T], str]) -> Callable[[T], str]:
    """``repr_method``, or, on an object its constructor left without an attribute that the
    repr reads, ``<ClassName (not fully built: 'ClassName' object has no attribute 'x')>``."""

    @functools.wraps(repr_method)
    def safe_repr(self: T) -> str:
        try:
            return repr_method(self)
        except AttributeError as error:
            return f"<{type(self).__name__} (not fully built: {error})>"

    return safe_repr
