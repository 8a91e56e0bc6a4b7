"""Tensor specs: the shape, dtype, device and value range of tensors and tensordicts.

The names follow torchrl (`Bounded`, `Unbounded`, `Categorical`, ...) so torchrl users feel at
home, but the code is written from scratch and kept small. A spec's `shape` includes its batch
dims: `expand(*batch)` prepends batch dims and `unbatch(n)` strips them again.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from gymvec.common.arrays import all_below, below_check
from gymvec.common.infos import InfoField
from gymvec.common.structure import LeafSpec

__all__ = [
    "Binary",
    "Bounded",
    "Categorical",
    "Composite",
    "MultiCategorical",
    "NonTensor",
    "TensorSpec",
    "Unbounded",
    "numpy_to_torch_dtype",
    "stack_specs",
    "torch_to_numpy_dtype",
]

NestedKey = str | tuple
ShapeLike = int | Sequence[int] | torch.Size
DeviceLike = torch.device | str | int | None

# Built by round-tripping empty arrays, so the table is exactly what torch itself maps.
_TORCH_TO_NUMPY: dict[torch.dtype, np.dtype] = {
    dtype: torch.empty(0, dtype=dtype).numpy().dtype
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    )
}
_NUMPY_TO_TORCH: dict[np.dtype, torch.dtype] = {v: k for k, v in _TORCH_TO_NUMPY.items()}

# Specs need comparisons and arithmetic; torch (CPU) lacks them for uint64 and complex dtypes.
_SPEC_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.uint16,
        torch.uint32,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    }
)
# torch has no CPU comparison kernels for these: compare them as int64 instead.
_WIDENED = frozenset({torch.bool, torch.uint16, torch.uint32})


def numpy_to_torch_dtype(np_dtype: Any) -> torch.dtype:
    """The torch dtype for a numpy dtype (or anything `np.dtype` accepts, e.g. `"float32"`)."""
    try:
        dtype = np.dtype(np_dtype)
    except TypeError as err:
        raise TypeError(f"{np_dtype!r} is not a numpy dtype") from err
    if dtype not in _NUMPY_TO_TORCH:
        raise TypeError(f"numpy dtype {dtype} has no torch equivalent")
    return _NUMPY_TO_TORCH[dtype]


def torch_to_numpy_dtype(torch_dtype: torch.dtype) -> np.dtype:
    """The numpy dtype for a torch dtype."""
    if torch_dtype not in _TORCH_TO_NUMPY:
        raise TypeError(f"torch dtype {torch_dtype} has no numpy equivalent")
    return _TORCH_TO_NUMPY[torch_dtype]


def _as_dtype(dtype: Any) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        dtype = numpy_to_torch_dtype(dtype)
    if dtype not in _SPEC_DTYPES:
        raise TypeError(f"dtype {_fmt_dtype(dtype)} is not supported by gymvec specs")
    return dtype


def _as_shape(shape: ShapeLike) -> torch.Size:
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 0:
            raise ValueError(f"a shape must hold non-negative ints, got {shape!r}")
    return torch.Size(int(dim) for dim in dims)


def _batch_shape(batch: tuple) -> torch.Size:
    # expand(4, 2) and expand((4, 2)) mean the same.
    if len(batch) == 1 and not isinstance(batch[0], int | np.integer):
        return _as_shape(batch[0])
    return _as_shape(batch)


def _as_device(device: Any) -> torch.device:
    if device is None:
        return torch.device("cpu")
    device = torch.device(device)
    # "cuda" and "cuda:0" must compare equal, so pin the index.
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _as_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    # Through numpy so that Python floats stay float64 (torch.as_tensor would pick float32).
    array = np.asarray(value)
    if array.dtype not in _NUMPY_TO_TORCH:
        raise TypeError(f"{name} must be numeric, got {value!r}")
    return torch.from_numpy(array.copy())


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64) if t.dtype in _WIDENED else t


def _dtype_range(dtype: torch.dtype) -> tuple[float, float]:
    if dtype == torch.bool:
        return 0, 1
    if dtype.is_floating_point:
        return -float("inf"), float("inf")
    info = torch.iinfo(dtype)
    return info.min, info.max


def _is_int_like(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point


def _fmt_dtype(dtype: torch.dtype | None) -> str:
    return str(dtype).removeprefix("torch.")


def _fmt_key(key: NestedKey | None) -> str:
    if key is None or key == ():
        return "value"
    if isinstance(key, str):
        return f'"{key}"'
    if len(key) == 1:
        return f'"{key[0]}"'
    return "(" + ", ".join(f'"{part}"' for part in key) + ")"


def _fmt_number(value: Any) -> str:
    return repr(value.item() if isinstance(value, torch.Tensor) else value)


def _fmt_values(t: torch.Tensor) -> str:
    """A scalar if all elements are equal, a short list, or a min/max summary."""
    flat = _wide(t.reshape(-1))
    if flat.numel() == 0:
        return "[]"
    if bool((flat == flat[0]).all()):
        return _fmt_number(flat[0])
    if flat.numel() <= 6:
        return "[" + ", ".join(_fmt_number(v) for v in flat.tolist()) + "]"
    return f"<min {_fmt_number(flat.min())} max {_fmt_number(flat.max())}>"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {_fmt_dtype(value.dtype)}"
    name = type(value).__name__
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"a {name} of shape {tuple(shape)} and dtype {dtype} (not a torch.Tensor)"
    if shape is not None:
        return f"a {name} of shape {tuple(shape)}"
    return f"a {name} (not a torch.Tensor)"


def _key_tuple(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if not isinstance(key, tuple):
        raise TypeError(f"spec keys are str or tuples of str, got {key!r}")
    parts: list[str] = []
    for part in key:
        parts.extend(_key_tuple(part))
    if not parts:
        raise KeyError("the empty key () names no spec")
    return tuple(parts)


class TensorSpec:
    """Base class: a description of the tensors a key may hold.

    Subclasses set `shape`, `dtype` and `device`; per-element tensors (bounds, nvec) are listed
    in `_tensor_fields` and plain attributes that take part in equality in `_scalar_fields`,
    so that expand / unbatch / to / clone / == are written once here.
    """

    shape: torch.Size
    dtype: torch.dtype | None
    device: torch.device | None
    _tensor_fields: tuple[str, ...] = ()
    _scalar_fields: tuple[str, ...] = ()

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.dtype is None:
            raise TypeError(f"{type(self).__name__} has no dtype")
        return torch_to_numpy_dtype(self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _full_shape(self, shape: ShapeLike) -> torch.Size:
        return torch.Size((*_as_shape(shape), *self.shape))

    def zero(self, shape: ShapeLike = ()) -> torch.Tensor:
        """Zeros of shape `(*shape, *self.shape)`: a placeholder, not necessarily in the spec."""
        return torch.zeros(self._full_shape(shape), dtype=self.dtype, device=self.device)

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> Any:
        """Random values of shape `(*shape, *self.shape)` inside the spec."""
        raise NotImplementedError

    def _values_in(self, value: torch.Tensor) -> bool:
        return True

    def array_check(self) -> Callable[[np.ndarray], bool] | None:
        """The value check of `is_in` for values in a CPU numpy array of this spec's shape and
        dtype (per-step paths that hold the array skip wrapping it); None when every value of
        the dtype is in the spec."""
        if type(self)._values_in is TensorSpec._values_in:
            return None
        return lambda array: self._values_in(torch.from_numpy(array))

    def is_in(self, value: Any) -> bool:
        """Whether `value` is a tensor of exactly this shape and dtype, with values in range."""
        return (
            isinstance(value, torch.Tensor)
            and value.shape == self.shape
            and value.dtype == self.dtype
            and self._values_in(value)
        )

    def validate(self, value: Any, key: NestedKey | None = None) -> None:
        """Raise ValueError naming `key`, this spec and `value` unless `self.is_in(value)`."""
        if not (
            isinstance(value, torch.Tensor)
            and value.shape == self.shape
            and value.dtype == self.dtype
        ):
            raise ValueError(f"{_fmt_key(key)}: expected {self!r}, got {_describe(value)}")
        if not self._values_in(value):
            wide = _wide(value)
            low = _fmt_number(wide.min()) if wide.numel() else "-"
            high = _fmt_number(wide.max()) if wide.numel() else "-"
            raise ValueError(f"{_fmt_key(key)}: values outside {self!r}: got min {low} max {high}")

    def _derive(
        self,
        shape: torch.Size,
        device: torch.device | None,
        fn: Callable[[torch.Tensor], torch.Tensor],
    ) -> TensorSpec:
        new = copy.copy(self)
        new.shape = shape
        new.device = device
        for name in self._tensor_fields:
            setattr(new, name, fn(getattr(self, name)))
        return new

    def expand(self, *batch: int | ShapeLike) -> TensorSpec:
        """A spec with batch dims prepended: `shape = (*batch, *self.shape)`."""
        shape = torch.Size((*_batch_shape(batch), *self.shape))
        return self._derive(shape, self.device, lambda t: t.expand(shape))

    def unbatch(self, ndims: int = 1) -> TensorSpec:
        """A spec with the first `ndims` dims removed (per-element values taken at index 0)."""
        if not 0 <= ndims <= len(self.shape):
            raise ValueError(f"cannot remove {ndims} dims from {self!r}")
        index = (0,) * ndims
        return self._derive(self.shape[ndims:], self.device, lambda t: t[index])

    def to(self, device: Any) -> TensorSpec:
        device = _as_device(device)
        return self._derive(self.shape, device, lambda t: t.to(device))

    def clone(self) -> TensorSpec:
        return self._derive(self.shape, self.device, torch.clone)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
            and all(getattr(self, f) == getattr(other, f) for f in self._scalar_fields)
            and all(torch.equal(getattr(self, f), getattr(other, f)) for f in self._tensor_fields)
        )

    # Specs are mutable containers of tensors. None is how Python marks a class unhashable;
    # typeshed types object.__hash__ as a method, so mypy rejects the None.
    __hash__ = None  # type: ignore[assignment]

    def _repr_tail(self) -> str:
        return "" if self.device is None or self.device.type == "cpu" else f", device={self.device}"


class Bounded(TensorSpec):
    """Values in `[low, high]` (inclusive, per element); infinite bounds allowed for floats."""

    dtype: torch.dtype
    _tensor_fields = ("low", "high")

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: ShapeLike | None = None,
        dtype: Any = torch.float32,
        device: Any = None,
    ) -> None:
        self.dtype = _as_dtype(dtype)
        self.device = _as_device(device)
        low_t, high_t = _as_tensor(low, "low"), _as_tensor(high, "high")
        if shape is None:
            shape = torch.broadcast_shapes(low_t.shape, high_t.shape)
        self.shape = _as_shape(shape)
        self.low = self._bound(low_t, "low")
        self.high = self._bound(high_t, "high")
        if bool((_wide(self.low) > _wide(self.high)).any()):
            raise ValueError(f"Bounded: low must be <= high, got low={low!r}, high={high!r}")

    def _bound(self, t: torch.Tensor, name: str) -> torch.Tensor:
        if t.dtype.is_floating_point and bool(t.isnan().any()):
            raise ValueError(f"Bounded: {name} contains NaN")
        if t.dtype != self.dtype and _is_int_like(self.dtype):
            # Casting must not wrap around or round: the bound must be a value of the dtype.
            if t.dtype.is_floating_point and not bool(t.isfinite().all()):
                raise ValueError(
                    f"Bounded: {name} must be finite for dtype {_fmt_dtype(self.dtype)}"
                )
            if not torch.equal(t.to(self.dtype).to(t.dtype), t):
                raise ValueError(
                    f"Bounded: {name}={_fmt_values(t)} is not representable in "
                    f"{_fmt_dtype(self.dtype)}"
                )
        t = t.to(device=self.device, dtype=self.dtype, copy=True)
        try:
            return t.expand(self.shape)
        except RuntimeError as err:
            raise ValueError(
                f"Bounded: {name} of shape {tuple(t.shape)} does not fit shape {tuple(self.shape)}"
            ) from err

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        full = self._full_shape(shape)
        low = _wide(self.low).to(torch.float64).expand(full)
        high = _wide(self.high).to(torch.float64).expand(full)
        u = torch.rand(full, generator=generator, dtype=torch.float64, device=self.device)
        if _is_int_like(self.dtype):
            # In float64 so the width of an int64 range (up to 2**64) cannot overflow; values at
            # the ends are taken from the exact integer bounds.
            v = torch.floor(low + u * (high - low + 1))
            low_i = _wide(self.low).expand(full)
            high_i = _wide(self.high).expand(full)
            # 2**63 - 1024 is the largest float64 below 2**63: the cast stays defined.
            inner = v.clamp(-(2.0**63), 2.0**63 - 1024).to(torch.int64)
            out = torch.where(v >= high, high_i, torch.where(v <= low, low_i, inner))
            return out.to(self.dtype)
        noise = torch.randn(full, generator=generator, dtype=torch.float64, device=self.device)
        noise = noise.abs()
        finite_low, finite_high = low.isfinite(), high.isfinite()
        v = torch.where(
            finite_low & finite_high,
            low * (1 - u) + high * u,  # lerp form: no overflow for bounds near the dtype's max
            torch.where(finite_low, low + noise, torch.where(finite_high, high - noise, noise)),
        )
        v = torch.minimum(torch.maximum(v, low), high)
        return v.to(self.dtype)

    def _values_in(self, value: torch.Tensor) -> bool:
        low, high = self.low.to(value.device), self.high.to(value.device)
        wide = _wide(value)
        return bool(((wide >= _wide(low)) & (wide <= _wide(high))).all())

    def __repr__(self) -> str:
        return (
            f"Bounded(shape={tuple(self.shape)}, dtype={_fmt_dtype(self.dtype)}, "
            f"low={_fmt_values(self.low)}, high={_fmt_values(self.high)}{self._repr_tail()})"
        )


class Unbounded(TensorSpec):
    """Any value of the dtype."""

    dtype: torch.dtype

    def __init__(self, shape: ShapeLike = (), dtype: Any = torch.float32, device: Any = None):
        self.shape = _as_shape(shape)
        self.dtype = _as_dtype(dtype)
        self.device = _as_device(device)

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        full = self._full_shape(shape)
        if self.dtype.is_floating_point:
            out = torch.randn(full, generator=generator, device=self.device)
            return out.to(self.dtype)
        # Small ints: a random int64 cast to int8 would mostly be noise at the extremes.
        low = -10 if self.dtype.is_signed else 0
        high = 2 if self.dtype == torch.bool else 11
        out = torch.randint(low, high, full, generator=generator, device=self.device)
        return out.to(self.dtype)

    def __repr__(self) -> str:
        return (
            f"Unbounded(shape={tuple(self.shape)}, dtype={_fmt_dtype(self.dtype)}"
            f"{self._repr_tail()})"
        )


def _int_dtype(cls: str, dtype: Any) -> torch.dtype:
    dtype = _as_dtype(dtype)
    if dtype.is_floating_point:
        raise TypeError(f"{cls}: dtype must be an integer or bool dtype, got {_fmt_dtype(dtype)}")
    return dtype


def _check_int_range(cls: str, dtype: torch.dtype, low: int, high: int) -> None:
    dmin, dmax = _dtype_range(dtype)
    if low < dmin or high > dmax:
        raise ValueError(
            f"{cls}: values [{low}, {high}] do not fit dtype {_fmt_dtype(dtype)} [{dmin}, {dmax}]"
        )


class Categorical(TensorSpec):
    """Integers in `[start, start + n)`, the same range for every element."""

    dtype: torch.dtype
    _scalar_fields = ("n", "start")

    def __init__(
        self,
        n: int,
        shape: ShapeLike = (),
        dtype: Any = torch.int64,
        device: Any = None,
        start: int = 0,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"Categorical: n must be a positive int, got {n!r}")
        if isinstance(start, bool) or not isinstance(start, int | np.integer):
            raise ValueError(f"Categorical: start must be an int, got {start!r}")
        self.n, self.start = int(n), int(start)
        self.shape = _as_shape(shape)
        self.dtype = _int_dtype("Categorical", dtype)
        self.device = _as_device(device)
        _check_int_range("Categorical", self.dtype, self.start, self.start + self.n - 1)

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        out = torch.randint(
            self.start,
            self.start + self.n,
            self._full_shape(shape),
            generator=generator,
            device=self.device,
        )
        return out.to(self.dtype)

    def _values_in(self, value: torch.Tensor) -> bool:
        if value.numel() == 0:
            return True
        if (
            self.start == 0
            and value.dtype == torch.int64
            and value.is_cpu
            and not value.requires_grad
        ):
            # This runs on every step, where torch ops cost several microseconds each.
            return all_below(value.numpy(), self.n)
        low, high = torch.aminmax(_wide(value))
        return self.start <= int(low) and int(high) <= self.start + self.n - 1

    def array_check(self) -> Callable[[np.ndarray], bool] | None:
        if self.start == 0 and self.dtype == torch.int64:
            return below_check(self.n, self.shape.numel())
        return super().array_check()

    def __repr__(self) -> str:
        start = f", start={self.start}" if self.start else ""
        return (
            f"Categorical(n={self.n}, shape={tuple(self.shape)}, "
            f"dtype={_fmt_dtype(self.dtype)}{start}{self._repr_tail()})"
        )


class MultiCategorical(TensorSpec):
    """Integers in `[start, start + nvec)` per element; `nvec` may have any shape."""

    dtype: torch.dtype
    _tensor_fields = ("nvec", "start")

    def __init__(
        self,
        nvec: Any,
        shape: ShapeLike | None = None,
        dtype: Any = torch.int64,
        device: Any = None,
        start: Any = None,
    ) -> None:
        self.dtype = _int_dtype("MultiCategorical", dtype)
        self.device = _as_device(device)
        nvec_t = self._ints(nvec, "nvec")
        start_t = (
            torch.zeros((), dtype=torch.int64) if start is None else self._ints(start, "start")
        )
        self.shape = _as_shape(nvec_t.shape if shape is None else shape)
        try:
            self.nvec = nvec_t.to(self.device).expand(self.shape)
            self.start = start_t.to(self.device).expand(self.shape)
        except RuntimeError as err:
            raise ValueError(
                f"MultiCategorical: nvec {tuple(nvec_t.shape)} and start {tuple(start_t.shape)} "
                f"do not fit shape {tuple(self.shape)}"
            ) from err
        if self.nvec.numel():
            if bool((self.nvec < 1).any()):
                raise ValueError(f"MultiCategorical: nvec must be >= 1, got {_fmt_values(nvec_t)}")
            low = int(self.start.min())
            high = int((self.start + self.nvec - 1).max())
            _check_int_range("MultiCategorical", self.dtype, low, high)

    @staticmethod
    def _ints(value: Any, name: str) -> torch.Tensor:
        t = _as_tensor(value, name)
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise TypeError(f"MultiCategorical: {name} must hold integers, got {t.dtype}")
        return t.to(torch.int64)

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        full = self._full_shape(shape)
        u = torch.rand(full, dtype=torch.float64, generator=generator, device=self.device)
        nvec = self.nvec.expand(full)
        offset = torch.minimum(torch.floor(u * nvec.to(torch.float64)).to(torch.int64), nvec - 1)
        return (offset + self.start).to(self.dtype)

    def _values_in(self, value: torch.Tensor) -> bool:
        start = self.start.to(value.device)
        wide = _wide(value)
        return bool(((wide >= start) & (wide < start + self.nvec.to(value.device))).all())

    def __repr__(self) -> str:
        start = f", start={_fmt_values(self.start)}" if bool(self.start.any()) else ""
        return (
            f"MultiCategorical(shape={tuple(self.shape)}, dtype={_fmt_dtype(self.dtype)}, "
            f"nvec={_fmt_values(self.nvec)}{start}{self._repr_tail()})"
        )


class Binary(TensorSpec):
    """Values 0 or 1. `Binary(n)` has shape `(n,)`; `shape` allows any shape."""

    dtype: torch.dtype

    def __init__(
        self,
        n: int | None = None,
        shape: ShapeLike | None = None,
        dtype: Any = torch.int8,
        device: Any = None,
    ) -> None:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int | np.integer)):
            raise ValueError(f"Binary: n must be an int, got {n!r}")
        # Remembered only so that MultiBinary(3) and MultiBinary((3,)) both round trip
        # (gymnasium compares their `n`, an int or a tuple); not part of equality.
        self._from_int = n is not None and shape is None
        if shape is None:
            if n is None:
                raise ValueError("Binary: give n or shape")
            shape = (n,)
        self.shape = _as_shape(shape)
        if n is not None and (not self.shape or self.shape[-1] != n):
            raise ValueError(f"Binary: shape {tuple(self.shape)} must end with n={n}")
        self.dtype = _as_dtype(dtype)
        self.device = _as_device(device)

    @property
    def n(self) -> int | None:
        """The size of the last dim (torchrl's meaning), None for a scalar spec."""
        return self.shape[-1] if self.shape else None

    def rand(self, shape: ShapeLike = (), generator: torch.Generator | None = None) -> torch.Tensor:
        out = torch.randint(0, 2, self._full_shape(shape), generator=generator, device=self.device)
        return out.to(self.dtype)

    def _values_in(self, value: torch.Tensor) -> bool:
        wide = _wide(value)
        return bool(((wide == 0) | (wide == 1)).all())

    def __repr__(self) -> str:
        return (
            f"Binary(shape={tuple(self.shape)}, dtype={_fmt_dtype(self.dtype)}{self._repr_tail()})"
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


def _mismatch(a: TensorSpec, b: TensorSpec) -> str | None:
    """Why `a` and `b` cannot be stacked, or None."""
    checks = [
        (type(a) is not type(b), "different classes"),
        (a.shape != b.shape, "different shapes"),
        (a.dtype != b.dtype, "different dtypes"),
        (a.device != b.device, "different devices"),
    ]
    if isinstance(a, Categorical) and isinstance(b, Categorical):
        checks += [(a.n != b.n, "different n"), (a.start != b.start, "different start")]
    if isinstance(a, Composite) and isinstance(b, Composite):
        checks += [
            (a.sequence != b.sequence, "different sequence flags"),
            (set(a.keys()) != set(b.keys()), "different keys"),
        ]
    return next((reason for failed, reason in checks if failed), None)


def _stack(specs: list[TensorSpec], path: tuple[str, ...]) -> TensorSpec:
    first = specs[0]
    for i, spec in enumerate(specs[1:], start=1):
        reason = _mismatch(first, spec)
        if reason is not None:
            where = f" at {_fmt_key(path)}" if path else ""
            raise ValueError(
                f"cannot stack specs{where} ({reason}): spec 0 is {first!r}, spec {i} is {spec!r}"
            )
    # From here on every spec is of first's class (_mismatch compared the classes).
    if isinstance(first, Composite):
        composites = cast(list[Composite], specs)
        return Composite(
            {key: _stack([s[key] for s in composites], (*path, key)) for key in first},
            shape=(len(specs), *first.shape),
            device=first.device,
            sequence=first.sequence,
        )
    if all(spec == first for spec in specs[1:]):
        return first.expand(len(specs))
    if isinstance(first, Bounded):
        bounded = cast(list[Bounded], specs)
        low = torch.stack([s.low for s in bounded])
        high = torch.stack([s.high for s in bounded])
        return Bounded(low, high, dtype=first.dtype, device=first.device)
    if isinstance(first, MultiCategorical):
        multi = cast(list[MultiCategorical], specs)
        nvec = torch.stack([s.nvec for s in multi])
        start = torch.stack([s.start for s in multi])
        return MultiCategorical(nvec, dtype=first.dtype, device=first.device, start=start)
    raise ValueError(f"cannot stack specs at {_fmt_key(path)}: {specs!r}")  # unreachable today


def stack_specs(specs: Sequence[TensorSpec]) -> TensorSpec:
    """Stack specs along a new leading dim (e.g. tasks whose specs differ only in bounds).

    Bounded bounds and MultiCategorical nvec/start are stacked per element; equal specs are
    expanded; Composites recurse. Anything else that differs raises ValueError.
    """
    specs = list(specs)
    if not specs:
        raise ValueError("stack_specs needs at least one spec")
    return _stack(specs, ())


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
