"""Composite specs as the engine sees them: flat leaves (key, shape, numpy dtype) and info
fields."""

from __future__ import annotations

import numpy as np

from gymvec.common.infos import InfoField
from gymvec.common.structure import LeafSpec
from gymvec.specs.base import numpy_to_torch_dtype, torch_to_numpy_dtype
from gymvec.specs.bounded import Unbounded
from gymvec.specs.composite import Composite


def spec_leaves(spec: Composite) -> list[LeafSpec]:
    """(key, shape, numpy dtype) of each leaf of an unbatched Composite spec."""
    leaves = []
    for key in spec.keys(include_nested=True, leaves_only=True):
        key = key if isinstance(key, tuple) else (key,)
        leaf = spec[key]
        leaves.append((key, tuple(leaf.shape), leaf.numpy_dtype))
    return leaves


def info_fields_of(info_spec: Composite) -> dict[str, InfoField]:
    """The info fields (see ``common.infos``) of an unbatched ``info_spec``."""
    fields = {}
    for name in info_spec:
        spec = info_spec[name]
        if spec.dtype is None:  # a Composite or NonTensor entry
            raise TypeError(f"info entry {name!r}: {spec!r} has no numeric dtype")
        fields[name] = InfoField(
            name, np.ndarray, tuple(spec.shape), torch_to_numpy_dtype(spec.dtype)
        )
    return fields


def info_spec_of(fields: dict[str, InfoField]) -> Composite:
    """The unbatched ``info_spec`` of info fields: one Unbounded spec per field."""
    return Composite(
        {
            name: Unbounded(shape=field.shape, dtype=numpy_to_torch_dtype(field.dtype))
            for name, field in fields.items()
        }
    )
