"""`Composite`: an ordered, nestable mapping from keys to specs (a tensordict's spec)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from gymvec.specs.base import (
    NestedKey,
    ShapeLike,
    TensorSpec,
    _as_device,
    _as_shape,
    _batch_shape,
    _describe,
    _fmt_key,
    _key_tuple,
)


class Composite(TensorSpec):
    """An ordered mapping from str keys to specs (nested Composites allowed).

    `shape` is the batch shape shared by every entry: each entry's shape starts with it.
    `sequence=True` marks a Composite built from a gymnasium Tuple (keys "0", "1", ...).
    `device=None` leaves the entries where they are; a device moves every entry onto it.
    Equality compares keys, entries (with their devices), shape and `sequence`, not the
    Composite's own `device`, so an unpinned spec equals the same spec pinned to "cpu".
    """

    dtype = None

    def __init__(
        self,
        spec_dict: Mapping[str, Any] | Composite | None = None,
        shape: ShapeLike = (),
        device: Any = None,
        sequence: bool = False,
        **kwargs: Any,
    ) -> None:
        self.shape = _as_shape(shape)
        self.device = None if device is None else _as_device(device)
        self.sequence = bool(sequence)
        self._specs: dict[str, TensorSpec] = {}
        entries = list(spec_dict.items()) if spec_dict is not None else []
        for key, spec in [*entries, *kwargs.items()]:
            self[key] = spec

    # -- mapping interface ---------------------------------------------------------------

    def _parent(self, keys: tuple[str, ...], create: bool) -> Composite:
        node = self
        for depth, part in enumerate(keys[:-1]):
            child = node._specs.get(part)
            if child is None and create:
                child = node._specs[part] = Composite(shape=node.shape, device=node.device)
            if not isinstance(child, Composite):
                what = "missing" if child is None else f"a {type(child).__name__}"
                raise KeyError(
                    f"{_fmt_key(keys)}: {_fmt_key(keys[: depth + 1])} is {what}, not a Composite"
                )
            node = child
        return node

    def __getitem__(self, key: NestedKey) -> TensorSpec:
        keys = _key_tuple(key)
        parent = self._parent(keys, create=False)
        if keys[-1] not in parent._specs:
            raise KeyError(f"{_fmt_key(keys)} is not in the spec (keys: {list(parent._specs)})")
        return parent._specs[keys[-1]]

    def __setitem__(self, key: NestedKey, spec: TensorSpec | Mapping) -> None:
        keys = _key_tuple(key)
        parent = self._parent(keys, create=True)
        if isinstance(spec, Mapping):
            spec = Composite(spec, shape=parent.shape, device=parent.device)
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"{_fmt_key(keys)}: expected a TensorSpec, got {type(spec).__name__}")
        if spec.shape[: len(parent.shape)] != parent.shape:
            raise ValueError(
                f"{_fmt_key(keys)}: shape {tuple(spec.shape)} does not start with the "
                f"Composite's shape {tuple(parent.shape)}"
            )
        if parent.device is not None and spec.device != parent.device:
            spec = spec.to(parent.device)
        parent._specs[keys[-1]] = spec

    def __delitem__(self, key: NestedKey) -> None:
        keys = _key_tuple(key)
        parent = self._parent(keys, create=False)
        if keys[-1] not in parent._specs:
            raise KeyError(f"{_fmt_key(keys)} is not in the spec")
        del parent._specs[keys[-1]]

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except (KeyError, TypeError):
            return False
        return True

    def get(self, key: NestedKey, default: Any = None) -> Any:
        try:
            return self[key]
        except (KeyError, TypeError):
            return default

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def _walk(
        self, prefix: tuple[str, ...], include_nested: bool, leaves_only: bool
    ) -> Iterator[tuple[NestedKey, TensorSpec]]:
        for name, spec in self._specs.items():
            path = (*prefix, name)
            nested = isinstance(spec, Composite)
            if not (leaves_only and nested):
                yield (name if not prefix else path), spec
            if isinstance(spec, Composite) and include_nested:
                yield from spec._walk(path, include_nested, leaves_only)

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> list[tuple[NestedKey, TensorSpec]]:
        """(key, spec) pairs; nested keys are tuples, top-level keys are str."""
        return list(self._walk((), include_nested, leaves_only))

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        return [key for key, _ in self._walk((), include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list[TensorSpec]:
        return [spec for _, spec in self._walk((), include_nested, leaves_only)]

    # -- spec interface ------------------------------------------------------------------

    def _rebuild(self, shape: torch.Size, device: Any, fn) -> Composite:
        return Composite(
            {key: fn(spec) for key, spec in self._specs.items()},
            shape=shape,
            device=device,
            sequence=self.sequence,
        )

    def zero(self, shape: ShapeLike = ()) -> TensorDict:
        return TensorDict(
            {key: spec.zero(shape) for key, spec in self._specs.items()},
            batch_size=self._full_shape(shape),
            device=self.device,
        )

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> TensorDict:
        return TensorDict(
            {key: spec.rand(shape, generator) for key, spec in self._specs.items()},
            batch_size=self._full_shape(shape),
            device=self.device,
        )

    def is_in(self, value: Any) -> bool:
        """Whether every entry of the spec is in `value` (a TensorDict); extra keys are fine."""
        return isinstance(value, TensorDictBase) and all(
            spec.is_in(value.get(key)) for key, spec in self._specs.items()
        )

    def validate(self, value: Any, key: NestedKey | None = None) -> None:
        prefix = () if key is None else _key_tuple(key)
        if not isinstance(value, TensorDictBase):
            raise ValueError(f"{_fmt_key(prefix)}: expected a TensorDict, got {_describe(value)}")
        for name, spec in self._specs.items():
            entry = value.get(name)
            if entry is None:
                raise ValueError(f"{_fmt_key((*prefix, name))}: missing, expected {spec!r}")
            spec.validate(entry, (*prefix, name))

    def expand(self, *batch: int | ShapeLike) -> Composite:
        dims = _batch_shape(batch)
        return self._rebuild(
            torch.Size((*dims, *self.shape)), self.device, lambda s: s.expand(dims)
        )

    def unbatch(self, ndims: int = 1) -> Composite:
        if not 0 <= ndims <= len(self.shape):
            raise ValueError(f"cannot remove {ndims} dims from a Composite of shape {self.shape}")
        return self._rebuild(self.shape[ndims:], self.device, lambda s: s.unbatch(ndims))

    def to(self, device: Any) -> Composite:
        device = _as_device(device)
        return self._rebuild(self.shape, device, lambda s: s.to(device))

    def clone(self) -> Composite:
        return self._rebuild(self.shape, self.device, lambda s: s.clone())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Composite)
            and self.shape == other.shape
            and self.sequence == other.sequence
            and self._specs.keys() == other._specs.keys()
            and all(spec == other._specs[key] for key, spec in self._specs.items())
        )

    __hash__ = None

    def __repr__(self) -> str:
        entries = ", ".join(f'"{key}": {spec!r}' for key, spec in self._specs.items())
        extra = f", shape={tuple(self.shape)}" if self.shape else ""
        if self.sequence:
            extra += ", sequence=True"
        return f"Composite({{{entries}}}{extra}{self._repr_tail()})"
