"""The gymnasium face's actions: checked against the action space and written into the
engine's buffers (:class:`ActionWriter`), with the errors gymnasium's users expect."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gymvec.common.arrays import below_words
from gymvec.common.structure import Leaf, get_leaf
from gymvec.engine.protocol import Engine
from gymvec.wire.commands import ignores_finished_actions


class ActionTarget(NamedTuple):
    """Where one array action leaf goes: its buffer, whether writes go through the engine
    (a float64 twin, see ``Buffers.write_action``) rather than into ``buffer`` directly, and
    the dtype kinds it takes."""

    leaf: Leaf
    buffer: np.ndarray
    has_twin: bool
    kinds: str


class DiscreteBound(NamedTuple):
    """A Discrete or MultiDiscrete action leaf: its path, its space, its buffer, and a check
    of whether values are in the space's range; for a whole batch of int64 values in
    ``[0, n)``, also that check's masks (``common.arrays.word_masks``), which
    :meth:`ActionWriter.write` applies without a call."""

    path: tuple
    space: spaces.Space
    values: np.ndarray
    in_range: Callable[[np.ndarray], bool]
    words: tuple[int, int] | None = None


class ActionWriter:
    """Writes a step's actions into an engine's buffers, checked: shape, dtype kind, and the
    range of Discrete/MultiDiscrete leaves (the actions of sub-envs the step ignores, see
    ``commands.ignores_finished_actions``, may be anything). What each leaf needs is looked up once
    here: every step writes them."""

    def __init__(
        self,
        engine: Engine,
        single_space: spaces.Space,
        space: spaces.Space,
        leaves: list[Leaf],
        autoreset: AutoresetMode,
    ):
        self.engine = engine
        self.single_space = single_space
        self.action_space = space
        self.num_envs = engine.num_envs
        # the planner's rule, asked once (the actions it leaves unused go unchecked)
        self.ignores_finished = ignores_finished_actions(autoreset)
        buffers = engine.buffers
        actions = buffers.action
        self.discrete_bounds = discrete_bounds(single_space, leaves, actions)
        # Discrete and MultiDiscrete take integers (as their spaces' `contains` says), Box and
        # MultiBinary numbers or bools (SB3 hands MultiBinary floats).
        discrete = {bound.path for bound in self.discrete_bounds}
        self.targets = [
            ActionTarget(
                leaf,
                actions[leaf.key],
                buffers.direct_action(leaf.key) is None,
                "iu" if leaf.path in discrete else "biuf",
            )
            for leaf in leaves
            if not leaf.is_object
        ]
        # the object action leaves (spaces without fixed shape)
        self.objects = [leaf for leaf in leaves if leaf.is_object]
        self.plain = [leaf.path for leaf in leaves] == [()]
        # The usual case, one array leaf without a float64 twin: written without the loop.
        self.plain_target = None
        if self.plain and self.targets and not self.targets[0].has_twin:
            self.plain_target = self.targets[0]

    def write(self, actions: Any) -> None:
        """Check ``actions`` (one per sub-env) against the action space and write them into
        the buffers."""
        if self.plain_target is not None:
            leaf, target, _, kinds = self.plain_target
            array = actions if type(actions) is np.ndarray else _as_numpy(actions)
            if array.shape != target.shape or array.dtype.kind not in kinds:
                _check_action_array(array, leaf.path, target.shape, kinds, self.action_space)
            target[...] = array
        else:
            self._write_leaves(actions)
        # Discrete ranges: a named error for values outside them (see _check_discrete), but
        # those of the sub-envs NEXT_STEP resets, whose actions it ignores
        for bound in self.discrete_bounds:
            words = bound.words
            if words is not None:  # all_below's two big-int operations inline: every step
                x = int.from_bytes(bound.values.tobytes(), _ORDER)
                if not (x & words[0] or (x + words[1]) & words[0]):
                    continue
            elif bound.in_range(bound.values):
                continue
            engine = self.engine
            finished = self.ignores_finished and engine.any_finished
            _check_discrete(self.discrete_bounds, engine.finished if finished else None)
            break

    def _write_leaves(self, actions: Any) -> None:
        for leaf, target, has_twin, kinds in self.targets:
            array = _as_numpy(actions if self.plain else get_leaf(actions, leaf.path))
            if array.shape != target.shape or array.dtype.kind not in kinds:
                _check_action_array(array, leaf.path, target.shape, kinds, self.action_space)
            if has_twin:  # float64 actions reach the sub-envs as float64
                self.engine.write_action(leaf.key, array)
            else:
                target[...] = array
        for leaf in self.objects:
            values = actions if self.plain else get_leaf(actions, leaf.path)
            if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
                raise TypeError(
                    f"actions{_path_str(leaf.path)}: expected a tuple of {self.num_envs} "
                    f"values for {self.action_space}, got {type(values).__name__}"
                )
            if len(values) != self.num_envs:
                raise ValueError(
                    f"actions{_path_str(leaf.path)}: expected {self.num_envs} values for "
                    f"{self.action_space}, got {len(values)}"
                )
            self.engine.write_action(leaf.key, values)

    def write_rows(self, actions: Any, rows: np.ndarray) -> None:
        """:meth:`write` for the sub-envs at ``rows``: one action row per index."""
        if self.objects:
            raise ValueError(
                "first-ready batches need actions of fixed shape: this action space has "
                "leaves without one"
            )
        k = len(rows)
        for leaf, target, has_twin, kinds in self.targets:
            array = _as_numpy(actions if self.plain else get_leaf(actions, leaf.path))
            expected = (k, *target.shape[1:])
            _check_action_array(
                array, leaf.path, expected, kinds, self.single_space, " (one row per env_id)"
            )
            if has_twin:
                self.engine.write_action_rows(leaf.key, rows, array)
            else:
                target[rows] = array
        # NEXT_STEP ignores the actions of the sub-envs it resets, whatever their values
        taken = [bound._replace(values=bound.values[rows]) for bound in self.discrete_bounds]
        _check_discrete(taken, self.engine.finished[rows])


def _as_numpy(value: Any) -> np.ndarray:
    if type(value) is np.ndarray:  # the usual case, first: this runs on every step
        return value
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


_ORDER = sys.byteorder


def _path_str(path: tuple) -> str:
    return "".join(f"[{part!r}]" for part in path)


def discrete_bounds(space: spaces.Space, leaves: list[Leaf], arrays: dict) -> list[DiscreteBound]:
    """The bound of each Discrete/MultiDiscrete action leaf."""
    bounds = []
    for leaf in leaves:
        sub = get_leaf(space, leaf.path)
        if leaf.is_object:
            continue
        array = arrays[leaf.key]
        words = None
        if isinstance(sub, spaces.Discrete):
            low, high = int(sub.start), int(sub.start + sub.n - 1)
            check = functools.partial(_scalar_range, low=low, high=high)
            if low == 0 and array.dtype == np.int64:
                words = below_words(high + 1, array.size)
        elif isinstance(sub, spaces.MultiDiscrete):
            check = functools.partial(_array_range, low=sub.start, high=sub.start + sub.nvec - 1)
        else:
            continue
        bounds.append(DiscreteBound(leaf.path, sub, array, check, words))
    return bounds


def _scalar_range(values: np.ndarray, low: int, high: int) -> bool:
    return values.min() >= low and values.max() <= high


def _array_range(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    return bool((values >= low).all() and (values <= high).all())


def _check_action_array(
    array: np.ndarray,
    path: tuple,
    expected: tuple,
    kinds: str,
    space: spaces.Space,
    rows_note: str = "",
) -> None:
    """An action leaf of the wrong shape, or of a dtype a cast would change (a float
    truncated, a string parsed), as a named error."""
    if array.shape != expected:
        # gymnasium's vector envs iterate the actions: a scalar is a TypeError there
        error = TypeError if array.ndim == 0 and not rows_note else ValueError
        raise error(
            f"actions{_path_str(path)}: expected shape {expected}{rows_note} for {space}, "
            f"got shape {array.shape}"
        )
    if array.dtype.kind not in kinds:
        wanted = "integers" if kinds == "iu" else "numbers"
        raise ValueError(
            f"actions{_path_str(path)}: expected {wanted} for {space}, got dtype {array.dtype}"
        )


def _check_discrete(bounds: list[DiscreteBound], ignored: np.ndarray | None = None) -> None:
    """Discrete actions outside their range: a named error here, not an assert in a worker.

    ``ignored`` marks the sub-envs whose actions go unused (checked only if the rest fail).
    """
    for path, sub, values, in_range, _ in bounds:
        if in_range(values):
            continue
        if ignored is not None:
            values = values[~ignored]
            if values.size == 0 or in_range(values):
                continue
        raise ValueError(
            f"actions{_path_str(path)}: expected values in {sub}, got "
            f"min {values.min()} max {values.max()}"
        )
