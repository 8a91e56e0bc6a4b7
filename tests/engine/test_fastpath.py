"""The assumptions behind ``gymvec.common.fastpath``, checked directly.

Each trick there leans on a detail of CPython, numpy, torch or tensordict and falls back to
plain, checked code without it. These tests fail loudly when a new version breaks a detail,
instead of letting gymvec quietly take the slower fallback (or worse).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from gymvec.common import fastpath
from gymvec.wire.buffers import BufferLayout, Buffers, private_memory


def test_cpython_reference_counts_are_used():
    assert sys.implementation.name == "cpython"
    assert fastpath.HAS_REFERENCE_COUNTS


def handed_out_like(n: int = 4) -> np.ndarray:
    """An array made as ``Buffers.handed_out_lanes`` makes them."""
    memory = bytearray(n * 8)
    array = np.frombuffer(memory, np.float64, n)
    array.shape = (n,)
    return array


def test_views_and_tensors_of_a_handed_out_array_refer_to_it():
    array = handed_out_like()
    alone = fastpath.reference_count(array)
    for make in (
        lambda a: a[1:],
        lambda a: a.reshape(2, 2),
        lambda a: a.view(np.int64),
        lambda a: a.T,
        lambda a: np.asarray(a)[::2],
        torch.from_numpy,
        lambda a: torch.from_numpy(a)[1:],
        lambda a: torch.from_numpy(a).view(2, 2),
    ):
        held = make(array)
        assert fastpath.reference_count(array) > alone, make
        del held
        assert fastpath.reference_count(array) == alone, make


def test_a_held_lane_is_never_free():
    layout = BufferLayout(4, [(("observation",), (128, 128), np.dtype(np.uint8))], [], {}, 2)
    buffers = Buffers(layout, private_memory(layout.nbytes))
    lanes = buffers.handed_out_lanes()
    assert buffers.free_lane() == 1
    view = torch.from_numpy(lanes[0])[2:]
    assert buffers.free_lane() == 2
    del view
    assert buffers.free_lane() == 1


def test_the_unchecked_tensordict_equals_the_checked_one():
    fastpath._bind_tensordict()
    assert fastpath._new_unsafe == TensorDict._new_unsafe  # the fast path is the one taken
    entries = {"a": torch.zeros(3, 2), "b": TensorDict({"c": torch.ones(3)}, [3])}
    fast = fastpath.tensordict_unchecked(dict(entries), torch.Size([3]), torch.device("cpu"))
    checked = TensorDict(dict(entries), batch_size=[3], device="cpu")
    assert type(fast) is TensorDict
    assert fast.batch_size == checked.batch_size and fast.device == checked.device
    assert (fast == checked).all()
    assert fast["a"] is entries["a"]  # no copy


def test_the_flat_unchecked_tensordict_takes_the_entries_as_they_are():
    fastpath._bind_tensordict()
    assert fastpath._takes_flat  # the fast path is the one taken
    entries = {"a": torch.zeros(3, 2), "b": torch.arange(3)}
    fast = fastpath.tensordict_unchecked(
        dict(entries), torch.Size([3]), torch.device("cpu"), flat=True
    )
    checked = TensorDict(dict(entries), batch_size=[3], device="cpu")
    assert type(fast) is TensorDict and fast.device == checked.device
    assert fast.batch_size == checked.batch_size and (fast == checked).all()
    assert fast["b"] is entries["b"]
    fast["c"] = torch.ones(3)  # a usable TensorDict after, not a frozen view of the dict
    assert set(fast.keys()) == {"a", "b", "c"}


def test_get_str_equals_get():
    fastpath._bind_tensordict()
    assert fastpath._plain_getter is TensorDict  # the fast path is the one taken
    td = TensorDict({"a": torch.zeros(3), "n": TensorDict({"x": torch.ones(3)}, [3])}, [3])
    assert fastpath.get_str(td, "a") is td.get("a")
    assert fastpath.get_str(td, "n")["x"] is td.get(("n", "x"))
    assert fastpath.get_str(td, "missing") is None
    lazy = LazyStackedTensorDict.lazy_stack([td[0], td[1]])  # not a plain TensorDict: get()
    assert fastpath.get_str(lazy, "a").tolist() == [0.0, 0.0]
    assert fastpath.get_str(lazy, "missing") is None


def test_set_unchecked_equals_set():
    fastpath._bind_tensordict()
    assert fastpath._plain_tensordict is TensorDict  # the fast path is the one taken
    value = TensorDict({"x": torch.arange(3)}, [3])
    fast, checked = TensorDict({}, [3]), TensorDict({}, [3])
    fastpath.set_unchecked(fast, "next", value)
    checked.set("next", value)
    assert (fast == checked).all() and fast.get("next")["x"] is value["x"]
    assert fast.batch_size == torch.Size([3])


def test_the_fallbacks_give_the_same_results(monkeypatch):
    monkeypatch.setattr(fastpath, "_new_unsafe", TensorDict)
    monkeypatch.setattr(fastpath, "_takes_flat", False)
    monkeypatch.setattr(fastpath, "_plain_tensordict", False)
    monkeypatch.setattr(fastpath, "_plain_getter", False)
    monkeypatch.setattr(fastpath, "HAS_REFERENCE_COUNTS", False)
    td = fastpath.tensordict_unchecked({"a": torch.zeros(2)}, torch.Size([2]), None, flat=True)
    fastpath.set_unchecked(td, "b", torch.ones(2))
    assert fastpath.get_str(td, "b") is td["b"] and fastpath.get_str(td, "c") is None
    assert td["a"].tolist() == [0.0, 0.0] and td["b"].tolist() == [1.0, 1.0]
    assert fastpath.reference_count(object()) == sys.maxsize  # no lane ever looks free
