"""`stack_specs`: specs of several tasks stacked along a new leading dim."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from gymvec.specs.base import TensorSpec, _fmt_key
from gymvec.specs.bounded import Bounded
from gymvec.specs.categorical import Categorical, MultiCategorical
from gymvec.specs.composite import Composite


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
