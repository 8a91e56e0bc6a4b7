"""Tests for gymvec.specs: leaf specs, Composite and stack_specs."""

import re

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from gymvec.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    Unbounded,
    numpy_to_torch_dtype,
    stack_specs,
    torch_to_numpy_dtype,
)

INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


# -- dtype helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "np_dtype, torch_dtype",
    [
        (np.bool_, torch.bool),
        (np.uint8, torch.uint8),
        (np.int8, torch.int8),
        (np.int16, torch.int16),
        (np.int32, torch.int32),
        (np.int64, torch.int64),
        (np.float16, torch.float16),
        (np.float32, torch.float32),
        (np.float64, torch.float64),
    ],
)
def test_dtype_helpers_round_trip(np_dtype, torch_dtype):
    assert numpy_to_torch_dtype(np_dtype) == torch_dtype
    assert numpy_to_torch_dtype(np.dtype(np_dtype)) == torch_dtype
    assert torch_to_numpy_dtype(torch_dtype) == np.dtype(np_dtype)


def test_dtype_helpers_reject_unmapped_dtypes():
    with pytest.raises(TypeError, match="no torch equivalent"):
        numpy_to_torch_dtype(np.str_)
    with pytest.raises(TypeError, match="no numpy equivalent"):
        torch_to_numpy_dtype(torch.bfloat16)


def test_spec_accepts_numpy_dtype_and_rejects_uint64():
    assert Bounded(0, 1, (2,), dtype=np.float64).dtype == torch.float64
    with pytest.raises(TypeError, match="uint64"):
        Unbounded((2,), dtype=torch.uint64)


# -- Bounded ---------------------------------------------------------------------------------


def test_bounded_shapes_and_storage():
    spec = Bounded(-1, 1, (3,))
    assert spec.shape == torch.Size([3])
    assert spec.dtype == torch.float32 and spec.device == torch.device("cpu")
    assert spec.low.shape == (3,) and spec.low.dtype == torch.float32
    assert spec.numpy_dtype == np.float32
    # shape inferred from array bounds, scalar broadcast against them
    inferred = Bounded(np.zeros((2, 3)), 5.0, dtype=torch.float64)
    assert inferred.shape == (2, 3)
    assert torch.equal(inferred.high, torch.full((2, 3), 5.0, dtype=torch.float64))


def test_bounded_keeps_float64_bounds_exactly():
    spec = Bounded(0.1, 0.3, (2,), dtype=torch.float64)
    assert spec.low[0].item() == 0.1 and spec.high[1].item() == 0.3


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES + [torch.uint32])
def test_bounded_rand_inside_per_element_bounds(dtype):
    low = torch.tensor([0, 2, 10, 100])
    high = torch.tensor([0, 5, 12, 120])
    spec = Bounded(low, high, dtype=dtype)
    samples = spec.rand((64,))
    assert samples.shape == (64, 4) and samples.dtype == dtype
    assert spec.expand(64).is_in(samples)
    assert all(spec.is_in(s) for s in samples[:8])


def test_bounded_int_rand_is_inclusive_of_both_bounds():
    spec = Bounded(-1, 1, (2000,), dtype=torch.int32)
    values = set(spec.rand().tolist())
    assert values == {-1, 0, 1}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_bounded_rand_full_integer_range(dtype):
    info = torch.iinfo(dtype)
    spec = Bounded(info.min, info.max, (256,), dtype=dtype)
    sample = spec.rand()
    assert spec.is_in(sample)
    assert sample.unique().numel() > 10  # really spread out, not stuck at one end


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_bounded_rand_with_infinite_and_huge_bounds(dtype):
    big = torch.finfo(dtype).max
    inf = float("inf")
    spec = Bounded(
        torch.tensor([-inf, 0.0, -inf, -big, 3.0], dtype=torch.float64),
        torch.tensor([inf, inf, 0.0, big, 3.0], dtype=torch.float64),
        dtype=dtype,
    )
    sample = spec.rand((100,))
    assert torch.isfinite(sample[:, :3]).all()
    assert spec.expand(100).is_in(sample)
    assert (sample[:, 4] == 3.0).all()


def test_bounded_bool():
    spec = Bounded(np.array([False, True]), np.array([True, True]), dtype=torch.bool)
    assert spec.is_in(torch.tensor([False, True]))
    assert not spec.is_in(torch.tensor([False, False]))
    assert spec.expand(50).is_in(spec.rand((50,)))


def test_bounded_rejects_bad_bounds():
    with pytest.raises(ValueError, match="low must be <= high"):
        Bounded(1.0, 0.0, (2,))
    with pytest.raises(ValueError, match="NaN"):
        Bounded(float("nan"), 1.0, (2,))
    with pytest.raises(ValueError, match="finite"):
        Bounded(-float("inf"), 1, (2,), dtype=torch.int32)
    with pytest.raises(ValueError, match="not representable"):
        Bounded(0, 300, (2,), dtype=torch.uint8)
    with pytest.raises(ValueError, match="does not fit shape"):
        Bounded(np.zeros(3), 1.0, (4,))


def test_bounded_is_in_checks_shape_dtype_values():
    spec = Bounded(-1.0, 1.0, (3,))
    assert spec.is_in(torch.zeros(3))
    assert not spec.is_in(torch.zeros(1, 3))
    assert not spec.is_in(torch.zeros(3, dtype=torch.float64))
    assert not spec.is_in(torch.tensor([0.0, 2.0, 0.0]))
    assert not spec.is_in(torch.tensor([0.0, float("nan"), 0.0]))
    assert not spec.is_in(np.zeros(3, dtype=np.float32))


def test_bounded_repr():
    assert repr(Bounded(-1, 1, (3,))) == "Bounded(shape=(3,), dtype=float32, low=-1.0, high=1.0)"
    per_element = Bounded(np.array([0, 1]), np.array([2, 3]), dtype=torch.int64)
    assert repr(per_element) == "Bounded(shape=(2,), dtype=int64, low=[0, 1], high=[2, 3])"
    large = Bounded(np.arange(10.0), 20.0)
    assert "low=<min 0.0 max 9.0>" in repr(large)


# -- Unbounded, Categorical, MultiCategorical, Binary ------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES + [torch.bool])
def test_unbounded_rand_and_zero(dtype):
    spec = Unbounded((2, 3), dtype=dtype)
    sample = spec.rand((5,))
    assert sample.shape == (5, 2, 3) and sample.dtype == dtype
    assert spec.is_in(sample[0])
    assert spec.zero().shape == (2, 3) and not spec.zero().any()
    assert spec.zero((4, 1)).shape == (4, 1, 2, 3)


def test_categorical_range_with_start():
    spec = Categorical(3, (1000,), dtype=torch.int32, start=-1)
    assert set(spec.rand().tolist()) == {-1, 0, 1}
    assert spec.is_in(torch.full((1000,), 1, dtype=torch.int32))
    assert not spec.is_in(torch.full((1000,), 2, dtype=torch.int32))
    assert not spec.is_in(torch.full((1000,), -2, dtype=torch.int32))
    assert repr(Categorical(2, (4,))) == "Categorical(n=2, shape=(4,), dtype=int64)"
    assert "start=-1" in repr(spec)


def test_categorical_dtype_checks():
    assert Categorical(256, dtype=torch.uint8).is_in(torch.tensor(255, dtype=torch.uint8))
    with pytest.raises(ValueError, match="do not fit dtype"):
        Categorical(257, dtype=torch.uint8)
    with pytest.raises(TypeError, match="integer or bool"):
        Categorical(3, dtype=torch.float32)
    with pytest.raises(ValueError, match="positive"):
        Categorical(0)
    done = Categorical(2, (1,), dtype=torch.bool)
    assert done.is_in(done.rand())


def test_multi_categorical_multi_dimensional_nvec_and_start():
    nvec = np.array([[2, 3], [4, 1]])
    start = np.array([[0, -1], [5, 7]])
    spec = MultiCategorical(nvec, dtype=torch.int16, start=start)
    assert spec.shape == (2, 2)
    samples = spec.rand((300,))
    assert samples.dtype == torch.int16 and spec.expand(300).is_in(samples)
    assert samples[:, 1, 1].eq(7).all()  # nvec 1: always start
    assert set(samples[:, 1, 0].tolist()) == {5, 6, 7, 8}
    assert not spec.is_in(torch.tensor([[2, 0], [5, 7]], dtype=torch.int16))
    assert not spec.is_in(torch.tensor([[0, -2], [5, 7]], dtype=torch.int16))


def test_multi_categorical_rejects_bad_nvec():
    with pytest.raises(ValueError, match=">= 1"):
        MultiCategorical([2, 0])
    with pytest.raises(TypeError, match="integers"):
        MultiCategorical([2.0, 3.0])
    with pytest.raises(ValueError, match="do not fit dtype"):
        MultiCategorical([2, 300], dtype=torch.uint8)


def test_binary_n_and_shape():
    assert Binary(3).shape == (3,) and Binary(3).n == 3
    assert Binary(shape=(2, 4)).n == 4
    assert Binary(3) == Binary(shape=(3,))
    assert Binary(3).dtype == torch.int8
    with pytest.raises(ValueError, match="must end with n"):
        Binary(3, shape=(4,))
    spec = Binary(shape=(4, 5), dtype=torch.bool)
    assert spec.is_in(spec.rand())
    ints = Binary(shape=(500,))
    assert set(ints.rand().tolist()) == {0, 1}
    assert not ints.is_in(torch.full((500,), 2, dtype=torch.int8))


def test_rand_with_generator_is_reproducible():
    spec = Composite(a=Bounded(-1, 1, (3,)), b=MultiCategorical([3, 4]), c=Unbounded((2,)))
    first = spec.rand((2,), generator=torch.Generator().manual_seed(0))
    second = spec.rand((2,), generator=torch.Generator().manual_seed(0))
    assert (first == second).all()


# -- expand / unbatch / to / clone / equality ----------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        Bounded(np.array([0.0, -1.0]), np.array([1.0, 2.0])),
        Unbounded((2,), dtype=torch.int32),
        Categorical(5, (2,), start=1),
        MultiCategorical([[2, 3]], start=[[1, 0]]),
        Binary(2),
    ],
    ids=lambda s: type(s).__name__,
)
def test_expand_unbatch_to_clone(spec):
    batched = spec.expand(4, 3)
    assert batched == spec.expand((4, 3)) == spec.expand(torch.Size([4, 3]))
    assert batched.shape == (4, 3, *spec.shape)
    assert batched.is_in(batched.rand())
    assert batched.unbatch(2) == spec
    assert batched.unbatch(1) == spec.expand(3)
    assert batched.unbatch(0) == batched
    with pytest.raises(ValueError):
        spec.unbatch(len(spec.shape) + 1)
    assert spec.clone() == spec and spec.clone() is not spec
    assert spec.to("cpu") == spec


def test_expand_expands_per_element_tensors():
    spec = Bounded(np.array([0.0, -1.0]), np.array([1.0, 2.0])).expand(3)
    assert spec.low.shape == (3, 2) and torch.equal(spec.low[2], torch.tensor([0.0, -1.0]))
    multi = MultiCategorical([2, 3], start=[0, 4]).expand(2)
    assert multi.nvec.tolist() == [[2, 3], [2, 3]] and multi.start.tolist() == [[0, 4], [0, 4]]


def test_clone_is_independent():
    spec = Bounded(0.0, 1.0, (2,))
    copy = spec.clone()
    copy.low[0] = -5.0
    assert spec.low[0] == 0.0 and copy != spec


def test_equality_compares_everything():
    assert Bounded(0, 1, (2,)) == Bounded(0.0, 1.0, (2,))
    assert Bounded(0, 1, (2,)) != Bounded(0, 2, (2,))
    assert Bounded(0, 1, (2,)) != Bounded(0, 1, (3,))
    assert Bounded(0, 1, (2,)) != Bounded(0, 1, (2,), dtype=torch.float64)
    assert Bounded(0, 1, (2,)) != Bounded(np.array([0.0, 0.5]), 1)
    assert Categorical(2) != Categorical(3)
    assert Categorical(2) != Categorical(2, start=1)
    assert MultiCategorical([2, 3]) != MultiCategorical([2, 4])
    assert MultiCategorical([2, 3]) != MultiCategorical([2, 3], start=[0, 1])
    assert Unbounded((2,)) != Bounded(-1, 1, (2,))
    assert Binary(2) != Binary(2, dtype=torch.bool)


# -- validate --------------------------------------------------------------------------------


def test_validate_messages_name_key_spec_and_given():
    spec = Categorical(2, (4,))
    spec.validate(torch.zeros(4, dtype=torch.int64), "action")  # valid: no error
    expected = (
        '"action": expected Categorical(n=2, shape=(4,), dtype=int64), '
        "got a tensor of shape (3,) and dtype int64"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        spec.validate(torch.zeros(3, dtype=torch.int64), "action")
    with pytest.raises(ValueError, match="dtype int32"):
        spec.validate(torch.zeros(4, dtype=torch.int32), "action")
    with pytest.raises(ValueError, match=r"got a ndarray of shape \(4,\) and dtype int64"):
        spec.validate(np.zeros(4, dtype=np.int64), "action")
    with pytest.raises(ValueError, match="got a list"):
        spec.validate([0, 0, 0, 0], "action")


def test_validate_out_of_range_message():
    spec = Bounded(-1.0, 1.0, (3,))
    expected = (
        '"action": values outside Bounded(shape=(3,), dtype=float32, low=-1.0, high=1.0): '
        "got min -3.0 max 7.0"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        spec.validate(torch.tensor([-3.0, 0.0, 7.0]), "action")
    with pytest.raises(ValueError, match=r'\("next", "obs"\): values outside'):
        spec.validate(torch.tensor([0.0, 0.0, float("nan")]), ("next", "obs"))
    with pytest.raises(ValueError, match="values outside Categorical"):
        Categorical(3, (2,)).validate(torch.tensor([0, 3]), "action")
    Unbounded((2,)).validate(torch.tensor([1e30, -1e30]), "reward")  # no range to violate


# -- Composite -------------------------------------------------------------------------------


def make_composite():
    return Composite(
        {
            "obs": Bounded(-1, 1, (3,)),
            "inner": Composite(
                {"pos": Unbounded((2,), dtype=torch.float64), "tup": Composite(sequence=True)}
            ),
        },
        action=Categorical(4),
    )


def test_composite_indexing_with_nested_keys():
    spec = make_composite()
    assert spec["inner", "pos"] is spec[("inner", "pos")] is spec["inner"]["pos"]
    spec["inner", "tup", "0"] = Binary(2)
    assert spec[("inner", ("tup", "0"))] == Binary(2)
    spec["new", "deep", "leaf"] = Categorical(2)  # intermediate Composites are created
    assert isinstance(spec["new", "deep"], Composite) and spec["new"].shape == ()
    assert ("new", "deep", "leaf") in spec and "new" in spec
    assert ("obs", "x") not in spec and "missing" not in spec and 3 not in spec
    del spec["new", "deep", "leaf"]
    assert ("new", "deep", "leaf") not in spec and ("new", "deep") in spec
    del spec["new"]
    with pytest.raises(KeyError, match='"missing"'):
        spec["missing"]
    with pytest.raises(KeyError, match="not a Composite"):
        spec["obs", "x"]
    with pytest.raises(KeyError, match="not a Composite"):
        spec["obs", "x"] = Binary(1)
    with pytest.raises(TypeError, match="expected a TensorSpec"):
        spec["bad"] = 3


def test_composite_keys_items_values_len_iter():
    spec = make_composite()
    assert len(spec) == 3 and list(spec) == ["obs", "inner", "action"]
    assert spec.keys() == ["obs", "inner", "action"]
    assert spec.keys(include_nested=True) == [
        "obs",
        "inner",
        ("inner", "pos"),
        ("inner", "tup"),
        "action",
    ]
    assert spec.keys(include_nested=True, leaves_only=True) == ["obs", ("inner", "pos"), "action"]
    assert spec.keys(leaves_only=True) == ["obs", "action"]
    assert spec.values(True, True) == [spec["obs"], spec["inner", "pos"], spec["action"]]
    assert dict(spec.items())["action"] == Categorical(4)
    assert spec.dtype is None


def test_composite_zero_rand_is_in():
    spec = make_composite()
    zero = spec.zero((2,))
    assert isinstance(zero, TensorDict) and zero.batch_size == (2,)
    assert zero["inner", "pos"].shape == (2, 2) and zero["inner", "pos"].dtype == torch.float64
    sample = spec.rand()
    assert sample.batch_size == () and spec.is_in(sample)
    batched = spec.expand(5)
    assert batched.shape == (5,) and batched["inner", "pos"].shape == (5, 2)
    assert batched.rand().batch_size == (5,) and batched.is_in(batched.rand())
    assert not spec.is_in(batched.rand())
    assert batched.unbatch(1) == spec
    sample["extra"] = torch.zeros(())  # extra keys are fine
    assert spec.is_in(sample)
    del sample["inner", "pos"]
    assert not spec.is_in(sample)
    assert not spec.is_in({"obs": torch.zeros(3)})


def test_composite_validate_names_nested_path():
    spec = make_composite()
    good = spec.rand()
    spec.validate(good)
    bad = good.clone()
    bad["inner", "pos"] = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r'^\("inner", "pos"\): expected Unbounded'):
        spec.validate(bad)
    with pytest.raises(ValueError, match=r'^\("next", "inner", "pos"\): expected'):
        spec.validate(bad, "next")
    del good["action"]
    with pytest.raises(ValueError, match='"action": missing, expected Categorical'):
        spec.validate(good)
    with pytest.raises(ValueError, match='"obs": expected a TensorDict, got a dict'):
        spec.validate({}, "obs")


def test_composite_shape_and_device_rules():
    spec = Composite({"a": Unbounded((4, 2))}, shape=(4,))
    assert spec.expand(3).shape == (3, 4) and spec["a"].shape == (4, 2)
    with pytest.raises(ValueError, match="does not start with"):
        spec["b"] = Unbounded((2,))
    nested = Composite({"x": {"y": Unbounded((4,))}}, shape=(4,))  # plain dicts are nested specs
    assert isinstance(nested["x"], Composite) and nested["x"].shape == (4,)
    with pytest.raises(ValueError):
        spec.unbatch(2)
    on_cpu = Composite({"a": Unbounded()}, device="cpu")
    assert on_cpu.device == torch.device("cpu") and on_cpu["a"].device == torch.device("cpu")


def test_composite_equality_and_repr():
    a = Composite(x=Binary(2), y=Categorical(3))
    b = Composite(y=Categorical(3), x=Binary(2))
    assert a == b  # key order does not matter
    assert a != Composite(x=Binary(2))
    assert a != Composite(x=Binary(2), y=Categorical(4))
    assert a != Composite({"x": Binary(2), "y": Categorical(3)}, sequence=True)
    assert a != a.expand(2)
    assert a.clone() == a and a.clone()["x"] is not a["x"]
    assert repr(Composite({"0": Binary(2)}, sequence=True)) == (
        'Composite({"0": Binary(shape=(2,), dtype=int8)}, sequence=True)'
    )


# -- stack_specs -----------------------------------------------------------------------------


def test_stack_bounded_per_element():
    stacked = stack_specs([Bounded(-1, 1, (2,)), Bounded(-2, 3, (2,))])
    assert isinstance(stacked, Bounded) and stacked.shape == (2, 2)
    assert stacked.low.tolist() == [[-1, -1], [-2, -2]] and stacked.high[1].tolist() == [3, 3]


def test_stack_equal_specs_expands():
    for spec in [Unbounded((3,)), Categorical(4, start=1), Binary(2), Bounded(0, 1, (2,))]:
        assert stack_specs([spec, spec.clone(), spec]) == spec.expand(3)


def test_stack_multi_categorical_and_composite():
    specs = [
        Composite(obs=Bounded(0, 1, (2,)), act=MultiCategorical([2, 3]), n=Categorical(2)),
        Composite(
            obs=Bounded(0, 5, (2,)), act=MultiCategorical([4, 3], start=[1, 0]), n=Categorical(2)
        ),
    ]
    stacked = stack_specs(specs)
    assert stacked.shape == (2,)
    assert stacked["act"].nvec.tolist() == [[2, 3], [4, 3]]
    assert stacked["act"].start.tolist() == [[0, 0], [1, 0]]
    assert stacked["obs"].high[:, 0].tolist() == [1, 5]
    assert stacked["n"] == Categorical(2, (2,))
    assert stacked.unbatch(1) == specs[0]  # index 0 of every per-element tensor


@pytest.mark.parametrize(
    "first, second, reason",
    [
        (Categorical(2), Categorical(3), "different n"),
        (Bounded(0, 1, (2,)), Bounded(0, 1, (3,)), "different shapes"),
        (Bounded(0, 1, (2,)), Bounded(0, 1, (2,), dtype=torch.float64), "different dtypes"),
        (Bounded(0, 1, (2,)), Unbounded((2,)), "different classes"),
        (Composite(a=Binary(1)), Composite(b=Binary(1)), "different keys"),
    ],
)
def test_stack_mismatch_raises(first, second, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        stack_specs([first, second])


def test_stack_mismatch_names_nested_key_and_both_specs():
    a = Composite(inner=Composite(act=Categorical(2)))
    b = Composite(inner=Composite(act=Categorical(3)))
    with pytest.raises(ValueError) as info:
        stack_specs([a, b])
    message = str(info.value)
    assert '("inner", "act")' in message
    assert "Categorical(n=2" in message and "Categorical(n=3" in message
    with pytest.raises(ValueError, match="at least one"):
        stack_specs([])


def test_specs_pickle_compactly_and_composite_device_rules():
    import pickle

    spec = Composite(img=Bounded(0, 255, (84, 84, 3), dtype=torch.uint8).expand(64))
    data = pickle.dumps(spec)
    assert pickle.loads(data) == spec
    assert len(data) < 10_000  # expanded bounds are views, not 64 copies
    assert Composite(a=Binary(2)) == Composite(a=Binary(2)).to("cpu")


@pytest.mark.parametrize(
    "spec, values",
    [
        (Categorical(3, shape=(4,)), [[0, 1, 2, 2], [0, 3, 1, 1], [-1, 0, 0, 0]]),
        (Categorical(3, shape=(4,), start=-1), [[-1, 0, 1, 1], [0, 2, 0, 0]]),
        (Categorical(3, shape=(4,), dtype=torch.int8), [[0, 1, 2, 2], [0, 3, 1, 1]]),
        (Bounded(-1.0, 1.0, shape=(2,)), [[0.5, -1.0], [1.5, 0.0]]),
        (MultiCategorical([2, 3]), [[1, 2], [2, 0]]),
        (Binary(3), [[0, 1, 1], [0, 2, 1]]),
    ],
)
def test_array_check_agrees_with_is_in(spec, values):
    check = spec.array_check()
    assert check is not None
    verdicts = []
    for row in values:
        tensor = torch.tensor(row, dtype=spec.dtype)
        assert check(tensor.numpy()) == spec.is_in(tensor)
        verdicts.append(spec.is_in(tensor))
    assert True in verdicts and False in verdicts  # both outcomes were checked
    assert Unbounded(shape=(2,)).array_check() is None  # every value is in
