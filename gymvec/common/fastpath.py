"""The speed tricks that lean on implementation details of CPython or tensordict, in one home.

Each trick has a fallback that is always correct, taken when the detail it relies on is
missing; ``tests/engine/test_fastpath.py`` checks every assumption directly, so that a new CPython,
numpy, torch or tensordict that breaks one fails loudly there instead of slowing gymvec down
(or worse) in silence. This module imports neither torch nor tensordict: the tensordict tricks
bind to tensordict the first time they run.

* :func:`reference_count`: observation lanes (see ``engine.buffers.BufferLayout``) are handed
  out without a copy and taken back once nobody refers to the handed-out array. Every numpy
  view of that array, and every ``torch.from_numpy`` of it, holds a reference to it, so
  ``sys.getrefcount`` tells whether anybody still does.
* :func:`tensordict_unchecked`: ``TensorDict._new_unsafe`` builds a TensorDict without
  checking each entry's batch size and device (the caller made them right): a few
  microseconds a step on small batches.
  With ``flat=True`` (``nested=False``) it takes the entries dict as it is, without looking
  for dicts to nest.
* :func:`set_unchecked`: ``td._set_str(key, value, validated=True)`` sets an entry the caller
  knows to fit, without ``set``'s checks.
* :func:`get_str`: ``td._get_str(key, None)`` reads a top-level entry without ``get``'s key
  parsing (a sixth of its cost).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

# CPython counts references; other implementations (PyPy) have no meaningful count, and the
# lanes then are never reused (every call copies, as without lanes).
HAS_REFERENCE_COUNTS = sys.implementation.name == "cpython" and hasattr(sys, "getrefcount")


def reference_count(obj: Any) -> int:
    """How many references ``obj`` has (CPython), or a large number where that is unknown
    (then no lane ever looks free)."""
    if HAS_REFERENCE_COUNTS:
        return sys.getrefcount(obj)
    return sys.maxsize


_new_unsafe: Any = None  # TensorDict._new_unsafe or the checked constructor, bound on first use
_takes_flat = False  # whether _new_unsafe takes nested=False
_plain_tensordict: Any = None  # the TensorDict class where _set_str can be used, else False
_plain_getter: Any = None  # the TensorDict class where _get_str can be used, else False


def tensordict_unchecked(entries: dict, batch_size: Any, device: Any, flat: bool = False) -> Any:
    """``TensorDict(entries, batch_size, device)`` without per-entry checks: every value must
    already be a tensor (or TensorDict) on ``device`` whose leading dims are ``batch_size``;
    ``flat``: none is a dict (the dict of entries is then taken over as it is)."""
    if _new_unsafe is None:
        _bind_tensordict()
    if flat and _takes_flat:
        return _new_unsafe(entries, batch_size=batch_size, device=device, nested=False)
    return _new_unsafe(entries, batch_size=batch_size, device=device)


def tensordict_maker(batch_size: Any, device: Any) -> Callable[[dict], Any]:
    """``tensordict_unchecked(entries, batch_size, device, flat=True)`` as a callable of the
    entries alone, bound once: for outputs made every step."""
    if _new_unsafe is None:
        _bind_tensordict()
    if _takes_flat:
        return functools.partial(_new_unsafe, batch_size=batch_size, device=device, nested=False)
    return functools.partial(_new_unsafe, batch_size=batch_size, device=device)


def get_str(td: Any, key: str) -> Any:
    """``td.get(key, None)`` for a string key."""
    if _plain_getter is None:
        _bind_tensordict()
    if type(td) is _plain_getter:
        return td._get_str(key, None)
    return td.get(key, None)


def set_unchecked(td: Any, key: str, value: Any) -> None:
    """``td.set(key, value)`` for a value the caller checked fits ``td`` (same batch size and
    device), skipping ``set``'s checks where tensordict allows it (plain TensorDicts)."""
    if _plain_tensordict is None:
        _bind_tensordict()
    if type(td) is _plain_tensordict:
        td._set_str(key, value, inplace=False, validated=True)
    else:
        td.set(key, value)


def _bind_tensordict() -> None:
    import inspect

    from tensordict import TensorDict

    global _new_unsafe, _takes_flat, _plain_tensordict, _plain_getter

    def parameters_of(name: str) -> set[str]:
        method = getattr(TensorDict, name, None)
        try:
            return set(inspect.signature(method).parameters) if callable(method) else set()
        except (TypeError, ValueError):
            return set()

    fast = getattr(TensorDict, "_new_unsafe", None)
    _new_unsafe = fast if callable(fast) else TensorDict
    _takes_flat = callable(fast) and "nested" in parameters_of("_new_unsafe")
    _plain_getter = TensorDict if {"key", "default"} <= parameters_of("_get_str") else False
    _plain_tensordict = False
    if {"key", "value", "inplace", "validated"} <= parameters_of("_set_str"):
        _plain_tensordict = TensorDict
