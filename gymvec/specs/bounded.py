"""Real-valued kinds: `Bounded` (values in per-element bounds) and `Unbounded`."""

from __future__ import annotations

from typing import Any

import torch

from gymvec.specs.base import (
    ShapeLike,
    TensorSpec,
    _as_dtype,
    _as_tensor,
    _fmt_dtype,
    _fmt_values,
    _is_int_like,
    _wide,
)


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
        low_t, high_t = _as_tensor(low, "low"), _as_tensor(high, "high")
        if shape is None:
            shape = torch.broadcast_shapes(low_t.shape, high_t.shape)
        self._set_form(shape, _as_dtype(dtype), device)
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
        self._set_form(shape, _as_dtype(dtype), device)

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
