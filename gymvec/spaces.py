"""Gymnasium spaces <-> gymvec specs, both ways, exactly.

`space_from_spec(spec_from_space(s)) == s` for Box, Discrete, MultiDiscrete, MultiBinary, Dict
and Tuple, nested, with dtypes, per-element bounds and `start` kept. Other spaces raise a
TypeError that names the space and where it sits (e.g. `observation_space["inner"][1]`), unless
`objects=True`: then they become `NonTensor` specs holding the space (how `GymEnv` keeps Text,
Graph, Sequence, OneOf and custom spaces), which convert back to it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from gymnasium import spaces

from gymvec.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    NonTensor,
    TensorSpec,
    Unbounded,
    _as_dtype,
)

__all__ = ["space_from_spec", "spec_from_space"]

_SUPPORTED_SPACES = "Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple"
_SUPPORTED_SPECS = (
    "Bounded, Unbounded, Categorical, MultiCategorical, Binary, Composite and NonTensor"
)


def _lookup(table: dict[type, Callable], obj: object) -> Callable | None:
    # Walk the MRO so that subclasses of supported classes convert like their base.
    return next((table[cls] for cls in type(obj).__mro__ if cls in table), None)


# -- space -> spec ---------------------------------------------------------------------------


def spec_from_space(
    space: spaces.Space, path: str = "space", *, objects: bool = False
) -> TensorSpec:
    """The spec of `space`; `path` names it in error messages (e.g. "observation_space").

    `objects`: spaces without a fixed shape and dtype become `NonTensor(space)` instead of
    raising.
    """
    convert = _lookup(_SPACE_TO_SPEC, space)
    if convert is None:
        if objects:
            return NonTensor(space)
        raise TypeError(
            f"cannot convert {type(space).__name__} at {path}: gymvec supports {_SUPPORTED_SPACES}"
        )
    if convert in (_dict_to_spec, _tuple_to_spec):
        return convert(space, path, objects)
    return convert(space, path)


def _torch_dtype(space: spaces.Space, path: str) -> torch.dtype:
    try:
        return _as_dtype(space.dtype)
    except TypeError as err:
        raise TypeError(
            f"cannot convert {type(space).__name__} at {path}: dtype {space.dtype} is not "
            "supported (uint64 and complex dtypes have no usable torch counterpart)"
        ) from err


def _box_to_spec(space: spaces.Box, path: str) -> TensorSpec:
    dtype = _torch_dtype(space, path)
    if space.dtype.kind == "f" and np.isneginf(space.low).all() and np.isposinf(space.high).all():
        return Unbounded(space.shape, dtype)
    return Bounded(space.low.copy(), space.high.copy(), space.shape, dtype)


def _discrete_to_spec(space: spaces.Discrete, path: str) -> TensorSpec:
    return Categorical(int(space.n), dtype=_torch_dtype(space, path), start=int(space.start))


def _multi_discrete_to_spec(space: spaces.MultiDiscrete, path: str) -> TensorSpec:
    return MultiCategorical(
        space.nvec.astype(np.int64),
        dtype=_torch_dtype(space, path),
        start=space.start.astype(np.int64),
    )


def _multi_binary_to_spec(space: spaces.MultiBinary, path: str) -> TensorSpec:
    # gymnasium keeps `n` as given (int or tuple) and compares it; Binary remembers which.
    if isinstance(space.n, int):
        return Binary(n=space.n, dtype=_torch_dtype(space, path))
    return Binary(shape=space.n, dtype=_torch_dtype(space, path))


def _dict_to_spec(space: spaces.Dict, path: str, objects: bool) -> TensorSpec:
    specs = {}
    for key, sub in space.spaces.items():
        if not isinstance(key, str):
            raise TypeError(f"cannot convert Dict at {path}: key {key!r} is not a str")
        specs[key] = spec_from_space(sub, f'{path}["{key}"]', objects=objects)
    return Composite(specs)


def _tuple_to_spec(space: spaces.Tuple, path: str, objects: bool) -> TensorSpec:
    specs = {
        str(i): spec_from_space(sub, f"{path}[{i}]", objects=objects)
        for i, sub in enumerate(space.spaces)
    }
    return Composite(specs, sequence=True)


_SPACE_TO_SPEC: dict[type, Callable[..., TensorSpec]] = {
    spaces.Box: _box_to_spec,
    spaces.Discrete: _discrete_to_spec,
    spaces.MultiDiscrete: _multi_discrete_to_spec,
    spaces.MultiBinary: _multi_binary_to_spec,
    spaces.Dict: _dict_to_spec,
    spaces.Tuple: _tuple_to_spec,
}


# -- spec -> space ---------------------------------------------------------------------------


def space_from_spec(spec: TensorSpec, path: str = "spec") -> spaces.Space:
    """The gymnasium space of `spec`; `path` names it in error messages."""
    convert = _lookup(_SPEC_TO_SPACE, spec)
    if convert is None:
        raise TypeError(
            f"cannot convert {type(spec).__name__} at {path}: gymvec converts {_SUPPORTED_SPECS}"
        )
    return convert(spec, path)


def _numpy_dtype(spec: TensorSpec, path: str) -> np.dtype:
    try:
        return spec.numpy_dtype
    except TypeError as err:
        raise TypeError(f"cannot convert {spec!r} at {path}: {err}") from err


def _array(t: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    return np.array(t.detach().cpu().numpy(), dtype=dtype)  # a copy, never a view of the spec


def _box(low: np.ndarray, high: np.ndarray, spec: TensorSpec, dtype: np.dtype) -> spaces.Box:
    # Explicit dtype: gymnasium would otherwise default to float32.
    return spaces.Box(low, high, tuple(spec.shape), dtype=dtype)


def _bounded_to_space(spec: Bounded, path: str) -> spaces.Space:
    dtype = _numpy_dtype(spec, path)
    return _box(_array(spec.low, dtype), _array(spec.high, dtype), spec, dtype)


def _unbounded_to_space(spec: Unbounded, path: str) -> spaces.Space:
    dtype = _numpy_dtype(spec, path)
    if dtype.kind == "f":
        low, high = -np.inf, np.inf
    elif dtype.kind == "b":
        low, high = False, True
    else:
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    return _box(np.full(spec.shape, low, dtype), np.full(spec.shape, high, dtype), spec, dtype)


def _categorical_to_space(spec: Categorical, path: str) -> spaces.Space:
    dtype = _numpy_dtype(spec, path)
    if dtype.kind == "b":
        low, high = (
            np.full(spec.shape, spec.start, dtype),
            np.full(spec.shape, spec.start + spec.n - 1, dtype),
        )
        return _box(low, high, spec, dtype)
    if not spec.shape:
        return spaces.Discrete(spec.n, start=spec.start, dtype=dtype)
    # What gymnasium's batch_space makes of a Discrete.
    nvec = np.full(spec.shape, spec.n, dtype)
    return spaces.MultiDiscrete(nvec, dtype=dtype, start=np.full(spec.shape, spec.start, dtype))


def _multi_categorical_to_space(spec: MultiCategorical, path: str) -> spaces.Space:
    dtype = _numpy_dtype(spec, path)
    if dtype.kind == "b":
        low = _array(spec.start, dtype)
        return _box(low, _array(spec.start + spec.nvec - 1, dtype), spec, dtype)
    nvec, start = _array(spec.nvec, dtype), _array(spec.start, dtype)
    return spaces.MultiDiscrete(nvec, dtype=dtype, start=start)


def _binary_to_space(spec: Binary, path: str) -> spaces.Space:
    dtype = _numpy_dtype(spec, path)
    if dtype != np.int8:  # MultiBinary is always int8
        return _box(np.zeros(spec.shape, dtype), np.ones(spec.shape, dtype), spec, dtype)
    if spec._from_int and len(spec.shape) == 1:
        return spaces.MultiBinary(spec.shape[0])
    return spaces.MultiBinary(tuple(spec.shape))


def _composite_to_space(spec: Composite, path: str) -> spaces.Space:
    if not spec.sequence:
        # A list of pairs keeps the spec's key order (a dict would be sorted by gymnasium).
        return spaces.Dict([(key, space_from_spec(spec[key], f'{path}["{key}"]')) for key in spec])
    expected = [str(i) for i in range(len(spec))]
    if sorted(spec.keys(), key=lambda k: (len(k), k)) != expected:
        raise ValueError(
            f"cannot convert {path} to a Tuple: a sequence Composite needs keys "
            f"{expected}, got {spec.keys()}"
        )
    return spaces.Tuple([space_from_spec(spec[key], f"{path}[{key}]") for key in expected])


def _non_tensor_to_space(spec: NonTensor, path: str) -> spaces.Space:
    if spec.space is None:
        raise TypeError(f"cannot convert {spec!r} at {path}: it holds no gymnasium space")
    return spec.space


_SPEC_TO_SPACE: dict[type, Callable[..., spaces.Space]] = {
    NonTensor: _non_tensor_to_space,
    Bounded: _bounded_to_space,
    Unbounded: _unbounded_to_space,
    Categorical: _categorical_to_space,
    MultiCategorical: _multi_categorical_to_space,
    Binary: _binary_to_space,
    Composite: _composite_to_space,
}


def spaces_of_specs(
    observation_spec: Composite, full_action_spec: Composite
) -> tuple[spaces.Space, spaces.Space]:
    """The gymnasium (observation, action) spaces of an env's unbatched specs: a lone
    ``"observation"`` key gives its own space, other observation keys a Dict."""
    keys = list(observation_spec.keys())
    if keys == ["observation"]:
        obs_space = space_from_spec(observation_spec["observation"], "observation_spec")
    else:
        obs_space = space_from_spec(observation_spec, "observation_spec")
    return obs_space, space_from_spec(full_action_spec["action"], "action_spec")
