"""gymvec specs <-> torchrl specs, leaf by leaf.

gymvec -> torchrl keeps dtype, shape, device and bounds exactly. torchrl's ``Categorical`` and
``MultiCategorical`` have no ``start``: a gymvec one with a non-zero ``start`` (a gymnasium
``Discrete(n, start=s)``) becomes an integer ``Bounded`` over the same values.

torchrl -> gymvec is the inverse, for the specs gymvec has: ``OneHot`` actions (torchrl's
``GymEnv`` without ``categorical_action_encoding=True``), lazily stacked (heterogeneous) specs
and ``Choice`` raise a TypeError that names where it sits.

Example:
    >>> from gymvec.specs import Categorical
    >>> from gymvec.torchrl import from_torchrl_spec, to_torchrl_spec
    >>> spec = to_torchrl_spec(Categorical(3, shape=(2,)))
    >>> type(spec).__name__, spec.n, tuple(spec.shape)
    ('Categorical', 3, (2,))
    >>> from_torchrl_spec(spec)
    Categorical(n=3, shape=(2,), dtype=int64)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torchrl import data as rl

from gymvec import specs as gv

__all__ = ["from_torchrl_spec", "to_torchrl_spec"]


def _lookup(table: dict[type, Callable], spec: object) -> Callable | None:
    # Along the MRO: torchrl's Binary and MultiCategorical are Categorical subclasses.
    return next((table[cls] for cls in type(spec).__mro__ if cls in table), None)


# ---- gymvec -> torchrl ------------------------------------------------------------------------


def to_torchrl_spec(spec: gv.TensorSpec, device: Any = None, path: str = "spec") -> rl.TensorSpec:
    """The torchrl spec of a gymvec spec (on ``device``, else on the spec's own device)."""
    convert = _lookup(_TO_TORCHRL, spec)
    if convert is None:
        raise TypeError(f"{path}: cannot convert {spec!r} to a torchrl spec")
    return convert(spec, _device(spec, device), path)


def _device(spec: gv.TensorSpec, device: Any) -> torch.device:
    if device is not None:
        return torch.device(device)
    return spec.device if spec.device is not None else torch.device("cpu")


def _bounded(low: torch.Tensor, high: torch.Tensor, spec: gv.TensorSpec, device) -> rl.Bounded:
    low = low.expand(spec.shape).to(device=device, dtype=spec.dtype).clone()
    high = high.expand(spec.shape).to(device=device, dtype=spec.dtype).clone()
    return rl.Bounded(low, high, shape=spec.shape, dtype=spec.dtype, device=device)


def _bounded_to_torchrl(spec: gv.Bounded, device, path) -> rl.TensorSpec:
    return _bounded(spec.low, spec.high, spec, device)


def _unbounded_to_torchrl(spec: gv.Unbounded, device, path) -> rl.TensorSpec:
    return rl.Unbounded(shape=spec.shape, dtype=spec.dtype, device=device)


def _categorical_to_torchrl(spec: gv.Categorical, device, path) -> rl.TensorSpec:
    if spec.start != 0:
        low = torch.tensor(spec.start)
        return _bounded(low, low + spec.n - 1, spec, device)
    return rl.Categorical(spec.n, shape=spec.shape, dtype=spec.dtype, device=device)


def _multi_categorical_to_torchrl(spec: gv.MultiCategorical, device, path) -> rl.TensorSpec:
    if bool(spec.start.any()) or not spec.shape:
        return _bounded(spec.start, spec.start + spec.nvec - 1, spec, device)
    nvec = spec.nvec.to(device).clone()
    return rl.MultiCategorical(nvec, shape=spec.shape, dtype=spec.dtype, device=device)


def _binary_to_torchrl(spec: gv.Binary, device, path) -> rl.TensorSpec:
    if not spec.shape:
        return rl.Categorical(2, shape=(), dtype=spec.dtype, device=device)
    return rl.Binary(n=spec.shape[-1], shape=spec.shape, dtype=spec.dtype, device=device)


def _non_tensor_to_torchrl(spec: gv.NonTensor, device, path) -> rl.TensorSpec:
    # One Python object per element of the batch, as gymvec's NonTensorStacks hold them.
    return rl.NonTensor(shape=spec.shape, device=device, batched=True)


def _composite_to_torchrl(spec: gv.Composite, device, path) -> rl.TensorSpec:
    entries = {
        name: to_torchrl_spec(sub, device, f'{path}["{name}"]') for name, sub in spec.items()
    }
    return rl.Composite(entries, shape=spec.shape, device=device)


_TO_TORCHRL: dict[type, Callable[..., rl.TensorSpec]] = {
    gv.Bounded: _bounded_to_torchrl,
    gv.Unbounded: _unbounded_to_torchrl,
    gv.Categorical: _categorical_to_torchrl,
    gv.MultiCategorical: _multi_categorical_to_torchrl,
    gv.Binary: _binary_to_torchrl,
    gv.NonTensor: _non_tensor_to_torchrl,
    gv.Composite: _composite_to_torchrl,
}


# ---- torchrl -> gymvec ------------------------------------------------------------------------


def from_torchrl_spec(
    spec: rl.TensorSpec, batch_dims: int = 0, path: str = "spec"
) -> gv.TensorSpec:
    """The gymvec spec of a torchrl spec whose first ``batch_dims`` dims are batch dims (a
    1-D ``Binary`` under them then converts back to gymnasium's ``MultiBinary(n)``)."""
    convert = _lookup(_FROM_TORCHRL, spec)
    if convert is None:
        raise TypeError(
            f"{path}: cannot convert torchrl's {type(spec).__name__} to a gymvec spec (gymvec "
            "has Bounded, Unbounded, Categorical, MultiCategorical, Binary, NonTensor and "
            "Composite specs)"
        )
    return convert(spec, batch_dims, path)


def _bounded_from_torchrl(spec: rl.Bounded, batch_dims: int, path) -> gv.TensorSpec:
    low, high = spec.space.low, spec.space.high
    return gv.Bounded(low, high, shape=spec.shape, dtype=spec.dtype, device=spec.device)


def _unbounded_from_torchrl(spec: rl.Unbounded, batch_dims: int, path) -> gv.TensorSpec:
    return gv.Unbounded(shape=spec.shape, dtype=spec.dtype, device=spec.device)


def _categorical_from_torchrl(spec: rl.Categorical, batch_dims: int, path) -> gv.TensorSpec:
    _check_unmasked(spec, path)
    return gv.Categorical(spec.n, shape=spec.shape, dtype=spec.dtype, device=spec.device)


def _multi_categorical_from_torchrl(
    spec: rl.MultiCategorical, batch_dims: int, path
) -> gv.TensorSpec:
    _check_unmasked(spec, path)
    nvec = spec.nvec.expand(spec.shape).clone()
    return gv.MultiCategorical(nvec, shape=spec.shape, dtype=spec.dtype, device=spec.device)


def _binary_from_torchrl(spec: rl.Binary, batch_dims: int, path) -> gv.TensorSpec:
    batch, feature = spec.shape[:batch_dims], spec.shape[batch_dims:]
    if len(feature) == 1:  # gymnasium's MultiBinary(n), not MultiBinary((n,))
        return gv.Binary(n=feature[0], dtype=spec.dtype, device=spec.device).expand(batch)
    return gv.Binary(shape=spec.shape, dtype=spec.dtype, device=spec.device)


def _non_tensor_from_torchrl(spec: rl.NonTensor, batch_dims: int, path) -> gv.TensorSpec:
    return gv.NonTensor(shape=spec.shape, device=spec.device)


def _composite_from_torchrl(spec: rl.Composite, batch_dims: int, path) -> gv.TensorSpec:
    if isinstance(spec, rl.StackedComposite):
        raise TypeError(
            f"{path}: cannot convert a lazily stacked Composite (sub-envs with different keys)"
        )
    entries = {
        name: from_torchrl_spec(sub, batch_dims, f'{path}["{name}"]')
        for name, sub in spec.items()
        if sub is not None
    }
    return gv.Composite(entries, shape=spec.shape, device=spec.device)


def _one_hot_from_torchrl(spec: rl.OneHot, batch_dims: int, path) -> gv.TensorSpec:
    raise TypeError(
        f"{path}: torchrl's {type(spec).__name__} (one-hot vectors) has no gymvec spec; build "
        "torchrl's GymEnv with categorical_action_encoding=True to get Categorical actions"
    )


def _unsupported_from_torchrl(spec: rl.TensorSpec, batch_dims: int, path) -> gv.TensorSpec:
    raise TypeError(
        f"{path}: cannot convert torchrl's {type(spec).__name__} to a gymvec spec (specs that "
        "differ per sub-env, or choices between specs, have no gymnasium space)"
    )


_FROM_TORCHRL: dict[type, Callable[..., gv.TensorSpec]] = {
    rl.Stacked: _unsupported_from_torchrl,
    rl.Choice: _unsupported_from_torchrl,
    rl.OneHot: _one_hot_from_torchrl,
    rl.Bounded: _bounded_from_torchrl,
    rl.Unbounded: _unbounded_from_torchrl,
    rl.Binary: _binary_from_torchrl,
    rl.MultiCategorical: _multi_categorical_from_torchrl,
    rl.Categorical: _categorical_from_torchrl,
    rl.NonTensor: _non_tensor_from_torchrl,
    rl.Composite: _composite_from_torchrl,
}


def _check_unmasked(spec: rl.Categorical, path) -> None:
    if getattr(spec, "mask", None) is not None:
        raise TypeError(f"{path}: cannot convert a masked {type(spec).__name__} (action masks)")
