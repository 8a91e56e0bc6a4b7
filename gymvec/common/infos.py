"""Which info entries ride the shared buffers, and which travel on the side.

gymnasium infos are free-form dicts. gymvec gives a fixed slot (a "field") to each entry that
is a number, a bool or a numeric array of fixed shape, so that it can sit in preallocated
(shared-memory) buffers and appear in tensordicts under ``("info", name)``. Everything else
(strings, nested dicts, keys that appear only at an episode's end, entries whose type changes)
is an "extra": it is kept as the Python object and handed over on the side.

A field's dtype is the one ``gymnasium.vector.VectorEnv._add_info`` would give the batched
array (``np.zeros(n, dtype=type(value))``), so a gymnasium face can rebuild infos exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_PYTHON_SCALARS = (int, float, bool)
# The ints a float64 field holds exactly (see InfoField.ints).
_EXACT_INT = 2**53


@dataclass(frozen=True)
class InfoField:
    """A numeric info entry of fixed type and shape."""

    name: str
    kind: type  # the exact type of the values: int, float, bool, a numpy scalar type or ndarray
    shape: tuple[int, ...]
    dtype: np.dtype
    # A float field that holds Python ints too (FrozenLake's "prob": an int after a reset, a
    # float after a step): a per-row flag (``Slot.info_int``) says which a value was.
    ints: bool = False

    def accepts(self, value: Any) -> bool:
        kind = type(value)
        if kind is not self.kind:
            return self.ints and kind is int and exact_int(value)
        if isinstance(value, np.ndarray):  # the kind is ndarray (exact type checked above)
            return value.shape == self.shape and value.dtype == self.dtype
        return True


def exact_int(value: Any) -> bool:
    """Whether ``value`` (a float or an int) is exact as a float64, as an int field of floats
    (``InfoField.ints``) needs its ints to be."""
    return type(value) is not int or -_EXACT_INT <= value <= _EXACT_INT


def info_field(name: str, value: Any) -> InfoField | None:
    """The field for ``value``, or None when it must travel as an extra."""
    kind = type(value)
    if kind in _PYTHON_SCALARS or isinstance(value, np.number):
        return InfoField(name, kind, (), np.dtype(kind))
    if kind is np.ndarray and value.dtype.kind in "biuf":
        return InfoField(name, kind, tuple(value.shape), value.dtype)
    return None


def infer_info_fields(*infos: dict) -> dict[str, InfoField]:
    """Fields for the entries of ``infos`` (e.g. a reset info and a step info).

    An entry whose type or shape differs between the infos gets no field.
    """
    fields: dict[str, InfoField] = {}
    conflicting: set[str] = set()
    for info in infos:
        for name, value in info.items():
            if not isinstance(name, str) or name.startswith("_"):
                continue  # gymnasium's mask keys and odd keys stay extras
            field = info_field(name, value)
            if field is None or (name in fields and fields[name] != field):
                conflicting.add(name)
            else:
                fields[name] = field
    return {name: field for name, field in fields.items() if name not in conflicting}


def declared_fields(examples: dict[str, Any] | None) -> dict[str, InfoField]:
    """Fields declared by the user: an ``InfoField`` or an example value per name."""
    fields = {}
    for name, example in (examples or {}).items():
        field = example if isinstance(example, InfoField) else info_field(name, example)
        if field is None:
            raise ValueError(
                f"info_fields[{name!r}]: expected an example number, bool or numeric array, "
                f"got {type(example).__name__}"
            )
        fields[name] = field
    return fields


def split_info(info: dict, fields: dict[str, InfoField]) -> tuple[dict, dict]:
    """``info`` as (values of declared fields, extras)."""
    declared, extras = {}, {}
    for name, value in info.items():
        field = fields.get(name)
        if field is not None and field.accepts(value):
            declared[name] = value
        else:
            extras[name] = value
    return declared, extras
