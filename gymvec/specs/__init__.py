"""Tensor specs: the shape, dtype, device and value range of tensors and tensordicts.

The names follow torchrl (`Bounded`, `Unbounded`, `Categorical`, ...) so torchrl users feel at
home, but the code is written from scratch and kept small. A spec's `shape` includes its batch
dims: `expand(*batch)` prepends batch dims and `unbatch(n)` strips them again.

One module per kind: `base` (TensorSpec, dtypes, shared helpers), `bounded` (Bounded,
Unbounded), `categorical` (Categorical, MultiCategorical, Binary), `non_tensor`, `composite`;
`stack` and `leaves` work on finished specs. Every name is importable from `gymvec.specs`.
"""

from gymvec.specs.base import DeviceLike as DeviceLike
from gymvec.specs.base import NestedKey as NestedKey
from gymvec.specs.base import ShapeLike as ShapeLike
from gymvec.specs.base import TensorSpec, numpy_to_torch_dtype, torch_to_numpy_dtype
from gymvec.specs.base import _as_dtype as _as_dtype  # gymvec.spaces checks dtypes with it
from gymvec.specs.bounded import Bounded, Unbounded
from gymvec.specs.categorical import Binary, Categorical, MultiCategorical
from gymvec.specs.composite import Composite
from gymvec.specs.leaves import info_fields_of as info_fields_of
from gymvec.specs.leaves import info_spec_of as info_spec_of
from gymvec.specs.leaves import spec_leaves as spec_leaves
from gymvec.specs.non_tensor import NonTensor
from gymvec.specs.non_tensor import non_tensor as non_tensor
from gymvec.specs.non_tensor import non_tensor_values as non_tensor_values
from gymvec.specs.non_tensor import object_values as object_values
from gymvec.specs.stack import stack_specs

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
