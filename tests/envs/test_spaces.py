"""Tests for gymvec.spaces: gymnasium spaces <-> specs, both ways."""

import re
import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from tensordict import TensorDict

from gymvec.spaces import space_from_spec, spec_from_space
from gymvec.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    TensorSpec,
    Unbounded,
)

INF = np.inf
BOX_DTYPES = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
]


def _boxes():
    for dtype in BOX_DTYPES:
        yield spaces.Box(0, 3, (2, 3), dtype=dtype)
        info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
        yield spaces.Box(info.min, info.max, (4,), dtype=dtype)
    yield spaces.Box(-INF, INF, (3,), dtype=np.float32)
    yield spaces.Box(-INF, INF, (), dtype=np.float64)
    yield spaces.Box(np.array([-INF, 0.0, -1.5]), np.array([INF, INF, 2.25]), dtype=np.float64)
    yield spaces.Box(np.array([[0, -5], [3, 7]]), np.array([[1, 5], [9, 7]]), dtype=np.int16)
    yield spaces.Box(np.float32(0.1), np.float32(0.7), (2,), dtype=np.float32)
    yield spaces.Box(0, 1, (3,), dtype=np.bool_)


LEAVES = [
    *_boxes(),
    spaces.Discrete(5),
    spaces.Discrete(3, start=-1),
    spaces.Discrete(4, start=2, dtype=np.int32),
    spaces.Discrete(200, dtype=np.uint8),
    spaces.MultiDiscrete([2, 3, 4]),
    spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, -1], [2, 10]]),
    spaces.MultiDiscrete([5, 6], dtype=np.int32, start=[1, 1]),
    spaces.MultiDiscrete(np.array([7, 9]), dtype=np.uint8),
    spaces.MultiBinary(3),
    spaces.MultiBinary((3,)),
    spaces.MultiBinary((2, 4)),
]
NESTED = [
    spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3, start=1)}),
    spaces.Tuple((spaces.MultiBinary(2), spaces.Box(0, 1, (1,), dtype=np.float64))),
    spaces.Dict(
        {
            "pos": spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, INF]), dtype=np.float64),
            "inner": spaces.Tuple(
                (
                    spaces.Dict({"k": spaces.MultiDiscrete([[2, 3]], dtype=np.int16)}),
                    spaces.Discrete(2, start=5, dtype=np.int8),
                    spaces.Tuple((spaces.MultiBinary((2, 2)),)),
                )
            ),
        }
    ),
    spaces.Dict(),
    spaces.Tuple(()),
]
ALL = LEAVES + NESTED


def _to_sample(spec: TensorSpec, value):
    """A spec value (tensor or TensorDict) as the matching gymnasium sample."""
    if isinstance(spec, Composite):
        parts = {key: _to_sample(sub, value[key]) for key, sub in spec.items()}
        return tuple(parts[str(i)] for i in range(len(parts))) if spec.sequence else parts
    return value.numpy()


def _to_tensors(spec: TensorSpec, sample):
    """A gymnasium sample as the matching spec value."""
    if isinstance(spec, Composite):
        items = {
            key: _to_tensors(sub, sample[int(key) if spec.sequence else key])
            for key, sub in spec.items()
        }
        return TensorDict(items, batch_size=spec.shape)
    return torch.as_tensor(np.asarray(sample))


def _assert_exactly_equal(a: spaces.Space, b: spaces.Space):
    """Stricter than gymnasium's ==: Box uses allclose there; here bounds must match exactly."""
    assert type(a) is type(b) and a == b
    if isinstance(a, spaces.Box):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.low, b.low, strict=True)
        np.testing.assert_array_equal(a.high, b.high, strict=True)
    if isinstance(a, spaces.MultiBinary):
        assert a.n == b.n and type(a.n) is type(b.n)
    if isinstance(a, spaces.Discrete | spaces.MultiDiscrete):
        assert a.dtype == b.dtype
    if isinstance(a, spaces.Dict):
        assert list(a.spaces) == list(b.spaces)
        for key in a.spaces:
            _assert_exactly_equal(a[key], b[key])
    if isinstance(a, spaces.Tuple):
        for x, y in zip(a.spaces, b.spaces, strict=True):
            _assert_exactly_equal(x, y)


@pytest.mark.parametrize("space", ALL, ids=repr)
def test_round_trip_is_exact(space):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. gymnasium's precision-loss warnings for Box
        spec = spec_from_space(space)
        back = space_from_spec(spec)
    _assert_exactly_equal(back, space)
    assert spec_from_space(back) == spec
    assert batch_space(back, 3) == batch_space(space, 3)
    _assert_exactly_equal(batch_space(back, 2), batch_space(space, 2))


def _gymnasium_can_sample(space: spaces.Space) -> bool:
    # Box.sample overflows (numpy OverflowError) when high - low exceeds float64's range.
    if isinstance(space, spaces.Box) and space.dtype == np.float64:
        finite = np.isfinite(space.low) & np.isfinite(space.high)
        with np.errstate(over="ignore"):
            return not np.isinf(space.high[finite] - space.low[finite]).any()
    return True


@pytest.mark.parametrize("space", ALL, ids=repr)
def test_rand_lands_in_the_space_and_samples_in_the_spec(space):
    spec = spec_from_space(space)
    for _ in range(3):
        value = spec.rand()
        assert spec.is_in(value)
        assert space.contains(_to_sample(spec, value))
    if _gymnasium_can_sample(space):
        space.seed(0)
        for _ in range(3):
            assert spec.is_in(_to_tensors(spec, space.sample()))


def test_box_conversion_kinds():
    assert spec_from_space(spaces.Box(-INF, INF, (3,))) == Unbounded((3,))
    assert spec_from_space(spaces.Box(-INF, INF, (2,), dtype=np.float16)) == Unbounded(
        (2,), dtype=torch.float16
    )
    half_open = spec_from_space(spaces.Box(np.array([-INF, 0], np.float32), INF, dtype=np.float32))
    assert isinstance(half_open, Bounded)
    assert half_open.low.tolist() == [-INF, 0.0] and half_open.high.tolist() == [INF, INF]
    # an int Box spanning its dtype is still Bounded, with the exact extremes
    info = np.iinfo(np.int64)
    full = spec_from_space(spaces.Box(info.min, info.max, (2,), dtype=np.int64))
    assert isinstance(full, Bounded) and full.dtype == torch.int64
    assert full.low.tolist() == [info.min] * 2 and full.high.tolist() == [info.max] * 2


def test_leaf_conversion_dtypes_and_start():
    assert spec_from_space(spaces.Discrete(4, start=2, dtype=np.int32)) == Categorical(
        4, dtype=torch.int32, start=2
    )
    multi = spec_from_space(spaces.MultiDiscrete([[2, 3]], dtype=np.int16, start=[[1, -1]]))
    assert multi == MultiCategorical([[2, 3]], dtype=torch.int16, start=[[1, -1]])
    assert spec_from_space(spaces.MultiBinary((2, 3))) == Binary(shape=(2, 3), dtype=torch.int8)
    tup = spec_from_space(spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))))
    assert tup.sequence and tup.keys() == ["0", "1"] and tup["1"] == Categorical(3)


def test_specs_to_spaces_keep_dtype():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        box = space_from_spec(Bounded(-3, 3, (2,), dtype=torch.int32))
        assert box == spaces.Box(-3, 3, (2,), dtype=np.int32) and box.dtype == np.int32
        wide = space_from_spec(Bounded(0.1, 0.2, (2,), dtype=torch.float64))
        assert wide.dtype == np.float64 and wide.low[0] == 0.1
    assert space_from_spec(Unbounded((2,))) == spaces.Box(-INF, INF, (2,), dtype=np.float32)
    info = np.iinfo(np.int16)
    assert space_from_spec(Unbounded((2,), dtype=torch.int16)) == spaces.Box(
        info.min, info.max, (2,), dtype=np.int16
    )
    assert space_from_spec(Unbounded((2,), dtype=torch.uint8)).low.tolist() == [0, 0]
    assert space_from_spec(Unbounded((2,), dtype=torch.bool)) == spaces.Box(
        0, 1, (2,), dtype=np.bool_
    )


def test_batched_specs_match_batch_space():
    for space in [
        spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64),
        spaces.Box(-INF, INF, (3,)),
        spaces.Discrete(4, start=1, dtype=np.int32),
    ]:
        batched = space_from_spec(spec_from_space(space).expand(5))
        _assert_exactly_equal(batched, batch_space(space, 5))


def test_non_int8_binary_and_bool_categorical_become_boxes():
    assert space_from_spec(Binary(3, dtype=torch.bool)) == spaces.Box(0, 1, (3,), dtype=np.bool_)
    assert space_from_spec(Binary(shape=(2,), dtype=torch.float32)) == spaces.Box(
        0.0, 1.0, (2,), dtype=np.float32
    )
    assert space_from_spec(Categorical(2, (1,), dtype=torch.bool)) == spaces.Box(
        0, 1, (1,), dtype=np.bool_
    )


def test_binary_keeps_int_or_tuple_n():
    assert space_from_spec(Binary(4)).n == 4
    assert space_from_spec(Binary(shape=(4,))).n == (4,)
    assert space_from_spec(Binary(4).expand(2)) == spaces.MultiBinary((2, 4))


@pytest.mark.parametrize(
    "space, where",
    [
        (spaces.Text(5), "observation_space"),
        (
            spaces.Dict({"inner": spaces.Tuple((spaces.Discrete(2), spaces.Text(5)))}),
            'observation_space["inner"][1]',
        ),
        (
            spaces.Tuple((spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)),)),
            "observation_space[0]",
        ),
        (spaces.Dict({"seq": spaces.Sequence(spaces.Discrete(2))}), 'observation_space["seq"]'),
        (
            spaces.Dict({"a": spaces.Dict({"b": spaces.OneOf((spaces.Discrete(2),))})}),
            'observation_space["a"]["b"]',
        ),
    ],
)
def test_unsupported_spaces_name_type_and_path(space, where):
    kinds = {"Text", "Graph", "Sequence", "OneOf"}
    with pytest.raises(TypeError) as info:
        spec_from_space(space, "observation_space")
    message = str(info.value)
    name = next(k for k in kinds if f"cannot convert {k} " in message)
    assert message == (
        f"cannot convert {name} at {where}: "
        "gymvec supports Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple"
    )


def test_unsupported_space_details():
    class Custom(spaces.Space):
        pass

    with pytest.raises(TypeError, match=re.escape("cannot convert Custom at action_space:")):
        spec_from_space(Custom(), "action_space")
    with pytest.raises(TypeError, match=re.escape('at space["x"]: dtype uint64')):
        spec_from_space(spaces.Dict({"x": spaces.Box(0, 3, (2,), dtype=np.uint64)}))
    with pytest.raises(TypeError, match="key 1 is not a str"):
        spec_from_space(spaces.Dict({1: spaces.Discrete(2)}))


def test_unsupported_specs_name_path():
    class Custom(TensorSpec):
        shape, dtype, device = torch.Size(), None, None

    with pytest.raises(TypeError, match=re.escape('cannot convert Custom at spec["a"][1]')):
        space_from_spec(Composite(a=Composite({"0": Binary(1), "1": Custom()}, sequence=True)))
    with pytest.raises(TypeError, match=re.escape('at spec["b"]')):
        space_from_spec(Composite(b=Bounded(0, 1, (2,), dtype=torch.bfloat16)))
    with pytest.raises(ValueError, match="sequence Composite needs keys"):
        space_from_spec(Composite({"0": Binary(1), "2": Binary(1)}, sequence=True))


def test_space_from_spec_does_not_share_memory():
    spec = Bounded(0.0, 1.0, (2,))
    box = space_from_spec(spec)
    box.low[0] = -5.0
    assert spec.low[0] == 0.0
    space = spaces.Box(0.0, 1.0, (2,))
    spec = spec_from_space(space)
    space.high[0] = 7.0
    assert spec.high[0] == 1.0
