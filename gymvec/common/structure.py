"""How nested gymnasium values map onto flat tensordict keys.

A gymnasium observation or action can be an array, a dict or a tuple, nested. gymvec stores
each array leaf under its own tensordict key: a Box observation under ``"observation"``, a Dict
observation under its own keys (nested dicts give nested keys), a Tuple under
``("observation", "0")``, ``("observation", "1")``... A :class:`Leaf` records both the key and
the path of dict keys / tuple indices that reaches the array inside the gymnasium value.

Spaces without a fixed shape and dtype (Text, Graph, Sequence, OneOf, custom spaces) are
"object leaves": one Python object per sub-env (dtype ``object``), kept beside the shared
buffers instead of in them; gymnasium's vector envs batch such values as tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from gymvec.errors import UnsupportedSpaceError

RESERVED_KEYS = ("action", "reward", "done", "terminated", "truncated", "next", "info", "_reset")


OBJECT = np.dtype(object)  # the dtype of an object leaf

LeafSpec = tuple[tuple[str, ...], tuple[int, ...], np.dtype]  # (key, shape, dtype) of a leaf
ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def is_object_space(space: spaces.Space) -> bool:
    """Whether values of ``space`` are object leaves (anything but arrays, dicts, tuples)."""
    return not isinstance(space, ARRAY_SPACES + (spaces.Dict, spaces.Tuple))


@dataclass(frozen=True)
class Leaf:
    """One array (or, with dtype ``object``, one Python object) inside a (possibly nested)
    gymnasium value."""

    key: tuple[str, ...]
    path: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def is_object(self) -> bool:
        return self.dtype == OBJECT


def space_leaves(space: spaces.Space, key: tuple[str, ...], path: tuple = ()) -> list[Leaf]:
    """The leaves of ``space``; ``key`` is the tensordict key of the whole value."""
    if isinstance(space, spaces.Dict):
        leaves = []
        for name, sub in space.spaces.items():
            leaves += space_leaves(sub, (*key, str(name)), (*path, name))
        return leaves
    if isinstance(space, spaces.Tuple):
        leaves = []
        for index, sub in enumerate(space.spaces):
            leaves += space_leaves(sub, (*key, str(index)), (*path, index))
        return leaves
    if is_object_space(space):
        return [Leaf(key, path, (), OBJECT)]
    # An array space: gymnasium types Space.shape as Optional, but these always have one.
    shape = cast(tuple[int, ...], space.shape)
    return [Leaf(key, path, tuple(shape), np.dtype(space.dtype))]


def leaf_specs(leaves: list[Leaf]) -> list[LeafSpec]:
    """(key, shape, dtype) of each leaf: what the buffers lay out."""
    return [(leaf.key, leaf.shape, leaf.dtype) for leaf in leaves]


def refuse_object_leaves(space: spaces.Space, leaves: list[Leaf], where: str, allowed=()) -> None:
    """Raise UnsupportedSpaceError for an object leaf of ``space`` (unless its space is one of
    the ``allowed`` classes), in the words of gymnasium's ``AsyncVectorEnv(shared_memory=True)``,
    whose tests match them; ``where`` says what cannot hold it."""
    for leaf in leaves:
        sub = get_leaf(space, leaf.path)
        if leaf.is_object and not isinstance(sub, allowed):
            raise UnsupportedSpaceError(
                f"{'/'.join(leaf.key)}: {sub} has a dynamic shape so its not possible to make "
                f"a static shared memory. {where}"
            )


def observation_leaves(space: spaces.Space) -> list[Leaf]:
    """Leaves of an observation space: a Dict's keys at the root, anything else under
    ``"observation"``."""
    if isinstance(space, spaces.Dict):
        for name in space.spaces:
            if name in RESERVED_KEYS:
                raise ValueError(
                    f"observation_space key {name!r} clashes with a reserved tensordict key "
                    f"(reserved: {RESERVED_KEYS})"
                )
        return space_leaves(space, ())
    return space_leaves(space, ("observation",))


def leaf_name(key: tuple[str, ...]) -> str | tuple[str, ...]:
    """A leaf's key as error messages show it: ``'observation'``, or a tuple when nested."""
    return key[0] if len(key) == 1 else key


def brief(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def missing_entry_error(who: str, key: tuple[str, ...], obs: Any) -> ValueError:
    """The error for an observation of ``who`` that lacks the leaf ``key`` of its space."""
    return ValueError(
        f"{who} returned an observation without the entry {leaf_name(key)!r} that its "
        f"observation space has: {brief(obs)}"
    )


def get_leaf(value: Any, path: tuple) -> Any:
    for part in path:
        value = value[part]
    return value


def build_value(space: spaces.Space, leaves: list[Leaf], arrays: list[Any]) -> Any:
    """Rebuild a gymnasium value of ``space`` from one array per leaf (inverse of get_leaf)."""
    if not isinstance(space, spaces.Dict | spaces.Tuple):
        return arrays[0]
    root: dict = {}
    for leaf, array in zip(leaves, arrays):
        node = root
        for part in leaf.path[:-1]:
            node = node.setdefault(part, {})
        node[leaf.path[-1]] = array
    return _to_space_type(space, root)


def _to_space_type(space: spaces.Space, node: Any) -> Any:
    if isinstance(space, spaces.Dict):
        return {name: _to_space_type(sub, node[name]) for name, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_to_space_type(sub, node[i]) for i, sub in enumerate(space.spaces))
    return node
