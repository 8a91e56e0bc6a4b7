"""Discrete kinds: `Categorical` (one range for every element), `MultiCategorical` (a range
per element) and `Binary`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gymvec.common.arrays import all_below, below_check, below_words
from gymvec.specs.base import (
    ShapeLike,
    TensorSpec,
    _as_dtype,
    _as_tensor,
    _dtype_range,
    _fmt_dtype,
    _fmt_values,
    _wide,
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
        self._set_form(shape, _int_dtype("Categorical", dtype), device)
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

    def array_words(self) -> tuple[int, int] | None:
        if self.start == 0 and self.dtype == torch.int64:
            return below_words(self.n, self.shape.numel())
        return None

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
        nvec_t = self._ints(nvec, "nvec")
        start_t = (
            torch.zeros((), dtype=torch.int64) if start is None else self._ints(start, "start")
        )
        shape = nvec_t.shape if shape is None else shape
        self._set_form(shape, _int_dtype("MultiCategorical", dtype), device)
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
        self._set_form(shape, _as_dtype(dtype), device)
        if n is not None and (not self.shape or self.shape[-1] != n):
            raise ValueError(f"Binary: shape {tuple(self.shape)} must end with n={n}")

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
