"""Python objects in tensordicts: the `NonTensor` spec and the helpers that read and build
tensordict's non-tensor entries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gymvec.specs.base import (
    NestedKey,
    ShapeLike,
    TensorSpec,
    _as_device,
    _as_shape,
    _describe,
    _fmt_key,
)


def non_tensor_values(value: Any) -> list | None:
    """The objects of a tensordict non-tensor entry, flat (row-major over its batch dims):
    ``[data]`` for a NonTensorData, the leaves of a NonTensorStack; None for anything else."""
    from tensordict import NonTensorData, NonTensorStack

    if isinstance(value, NonTensorData):  # one object for every element of its batch
        return [value.data] * math.prod(value.batch_size)
    if isinstance(value, NonTensorStack):
        flat: list = []
        stack = value.tolist()

        def walk(node: Any, depth: int) -> None:
            if depth == 0:
                flat.append(node)
            else:
                for item in node:
                    walk(item, depth - 1)

        walk(stack, len(value.batch_size))
        return flat
    return None


def object_values(value: Any) -> list:
    """``non_tensor_values(value)`` of an entry known to hold objects; TypeError for anything
    else."""
    values = non_tensor_values(value)
    if values is None:
        raise TypeError(f"expected a NonTensorData or NonTensorStack, got {_describe(value)}")
    return values


def non_tensor(values: Sequence[Any], shape: torch.Size) -> Any:
    """A NonTensorStack of ``shape`` holding ``values`` (flat, row-major); NonTensorData for
    ``shape == ()``."""
    from tensordict import NonTensorData, NonTensorStack

    values = list(values)
    if not shape:
        return NonTensorData(values[0], batch_size=())
    if len(shape) == 1:
        return NonTensorStack.from_list(values)
    rows = math.prod(shape[1:])
    return NonTensorStack(
        *[non_tensor(values[k * rows : (k + 1) * rows], shape[1:]) for k in range(shape[0])]
    )


class NonTensor(TensorSpec):
    """Python objects, one per element of ``shape`` (its batch dims): the values of a gymnasium
    space without a fixed shape and dtype (Text, Graph, Sequence, OneOf, custom spaces).

    Tensordicts hold them as ``NonTensorData`` (no batch dims) or ``NonTensorStack``. With a
    ``space``, ``rand`` samples it and ``is_in`` checks every object against it if it is one
    of gymnasium's own spaces; the ``contains`` of a custom space may not describe what its
    env takes (gymnasium's vector envs never call it), so its objects are taken as they are.
    """

    _scalar_fields = ("space",)

    def __init__(self, space: Any = None, shape: ShapeLike = (), device: Any = None):
        self.space = space
        self.shape = _as_shape(shape)
        self.dtype = None
        self.device = None if device is None else _as_device(device)

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(object)

    def zero(self, shape: ShapeLike = ()) -> Any:
        """``None`` objects: a placeholder, not necessarily in the space."""
        full = self._full_shape(shape)
        return non_tensor([None] * math.prod(full), full)

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> Any:
        """Samples of the space (its own random generator: ``generator`` is not used)."""
        full = self._full_shape(shape)
        sample = self.space.sample if self.space is not None else lambda: None
        return non_tensor([sample() for _ in range(math.prod(full))], full)

    def is_in(self, value: Any) -> bool:
        values = non_tensor_values(value)
        return (
            values is not None
            and tuple(value.batch_size) == tuple(self.shape)
            and not self._outside(values)
        )

    def _outside(self, values: list) -> list:
        """The objects that are not in the space (checked for gymnasium's own spaces)."""
        if self.space is None or type(self.space).__module__.split(".")[0] != "gymnasium":
            return []
        return [v for v in values if v not in self.space]

    def validate(self, value: Any, key: NestedKey | None = None) -> None:
        values = non_tensor_values(value)
        if values is None or tuple(value.batch_size) != tuple(self.shape):
            raise ValueError(f"{_fmt_key(key)}: expected {self!r}, got {_describe(value)}")
        outside = self._outside(values)
        if outside:
            raise ValueError(f"{_fmt_key(key)}: {outside[0]!r} is not in {self.space}")

    def __repr__(self) -> str:
        return f"NonTensor(space={self.space}, shape={tuple(self.shape)}{self._repr_tail()})"
