"""The base of every spec (`TensorSpec`), the numpy <-> torch dtype tables, and the
helpers the kinds share (argument coercion, error messages)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

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

    Subclasses set `shape`, `dtype` and `device` (`_set_form`); per-element tensors (bounds,
    nvec) are listed in `_tensor_fields` and plain attributes that take part in equality in
    `_scalar_fields`, so that expand / unbatch / to / clone / == are written once here.
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

    def _set_form(self, shape: ShapeLike, dtype: torch.dtype, device: Any) -> None:
        """Set the spec's shape, dtype and device (the shape and device checked here)."""
        self.shape = _as_shape(shape)
        self.dtype = dtype
        self.device = _as_device(device)

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

    def array_words(self) -> tuple[int, int] | None:
        """Where :meth:`array_check` is ``all_below`` on int64 values, its masks (see
        ``common.arrays.below_words``), for a per-step path to apply inline; else None."""
        return None

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
