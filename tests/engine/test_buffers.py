"""``wire/buffers.py``: where actions are written (directly, through float64 twins, or into
object lists), and the members front ends may use."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from gymvec.common.structure import OBJECT
from gymvec.wire.buffers import BufferLayout, Buffers, private_memory

N = 4
NARROW = ("action", "narrow")
EXACT = ("action", "exact")
WORDS = ("action", "words")


def _buffers(*, wide_actions: bool = True) -> Buffers:
    actions = [
        (NARROW, (2,), np.dtype(np.float32)),
        (EXACT, (), np.dtype(np.int64)),
        (WORDS, (), OBJECT),
    ]
    obs = [(("observation",), (3,), np.dtype(np.float32))]
    layout = BufferLayout(N, obs, actions, {}, wide_actions=wide_actions)
    return Buffers(layout, private_memory(layout.nbytes))


def test_direct_action_only_where_no_twin_or_object_list_takes_the_values() -> None:
    buffers = _buffers()
    assert buffers.has_float64_twins
    assert buffers.direct_action(NARROW) is None  # float32 with a float64 twin
    assert buffers.direct_action(WORDS) is None  # an object leaf
    assert buffers.direct_action(EXACT) is buffers.action[EXACT]
    plain = _buffers(wide_actions=False)
    assert not plain.has_float64_twins
    assert plain.direct_action(NARROW) is plain.action[NARROW]


def test_float64_actions_reach_the_twin_and_narrow_ones_the_leaf() -> None:
    buffers = _buffers()
    twin = buffers.wide_action[NARROW]
    wide = np.full((N, 2), 0.1, np.float64)
    buffers.write_action(NARROW, wide)
    assert twin.in_use.all() and np.array_equal(twin.values, wide)  # not rounded to float32
    buffers.write_action(NARROW, np.ones((N, 2), np.float32))
    assert not twin.in_use.any()
    assert np.array_equal(buffers.action[NARROW], np.ones((N, 2), np.float32))
    rows = np.array([1, 3])
    buffers.write_action_rows(NARROW, rows, np.full((2, 2), 0.2, np.float64))
    assert twin.in_use.tolist() == [False, True, False, True]
    assert twin.values[3, 0] == 0.2
    buffers.mark_actions_narrow()
    assert not twin.in_use.any()


def test_object_actions_go_to_this_process_list() -> None:
    buffers = _buffers()
    buffers.write_action(WORDS, ["a", "b", "c", "d"])
    assert buffers.action_objects[WORDS] == ["a", "b", "c", "d"]
    buffers.write_action_rows(WORDS, np.array([2, 0]), ["x", "y"])
    assert buffers.action_objects[WORDS] == ["y", "b", "x", "d"]


def test_lanes_only_for_large_enough_observations() -> None:
    small = _buffers()
    assert not small.has_lanes
    obs = [(("observation",), (256, 256), np.dtype(np.uint8))]
    layout = BufferLayout(N, obs, [], {}, 2)
    assert Buffers(layout, private_memory(layout.nbytes)).has_lanes


# The engine's own members of Buffers: front ends go through the members its docstring lists.
ENGINE_ONLY = {"wide_action", "action_objects", "obs_lanes"}
GYMVEC = Path(__file__).resolve().parents[2] / "gymvec"
FRONT_ENDS = sorted(
    path
    for folder in ("vector", "envs", "integrations", "tianshou", "torchrl")
    for path in (GYMVEC / folder).glob("*.py")
    # Engine-side code that lives beside its front end: TensorDictEngine (an engine filling
    # its own buffers) and sub_env_kind (the driver of EnvBase sub-envs, run by sub-env groups)
    if path.name not in ("tensordict_engine.py", "sub_env_kind.py")
)


@pytest.mark.parametrize("path", FRONT_ENDS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_front_ends_use_no_engine_only_member_of_buffers(path: Path) -> None:
    tree = ast.parse(path.read_text())
    used = {
        (node.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ENGINE_ONLY
    }
    assert not used, f"{path.name} reads the engine's own buffers members: {sorted(used)}"


def test_the_front_end_check_reads_the_front_ends() -> None:
    names = {path.name for path in FRONT_ENDS}
    assert {"vector_env.py", "actions.py", "batched.py", "first_ready_batches.py"} <= names
