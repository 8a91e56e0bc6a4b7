"""Faults that heal on the tensordict side (API section 13): the ``"fault"`` flag and the last
observation of the rows the engine rebuilt.

With ``on_fault`` restarting, a batched env's done spec carries a bool ``"fault"`` entry
(trailing dim of 1, as the other flags): ``("next", "fault")`` is True on the rows whose
sub-env faulted in that step and False elsewhere, and False at the root after a reset. The
engine reads a faulted row as truncated with reward 0, but leaves its observation to the front
end: :class:`LastRoot` keeps the root each call returned (a reference, no copy) and gives the
faulted rows of ``"next"`` their last observation from it.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from gymvec.envs.base import _merge_reset, copy_object_rows, copy_rows
from gymvec.specs import Categorical, Composite

FAULT_KEY = "fault"


def with_fault_spec(done_spec: Composite, batch_size: torch.Size) -> Composite:
    """``done_spec`` with the bool ``"fault"`` flag."""
    done_spec[FAULT_KEY] = Categorical(2, shape=(*batch_size, 1), dtype=torch.bool)
    return done_spec


def fault_flags(num_envs: int, faults: dict[int, str] | None) -> np.ndarray:
    """The ``"fault"`` flags of a call whose faulted rows are ``faults``' keys."""
    flags = np.zeros((num_envs, 1), dtype=np.bool_)
    if faults:
        flags[list(faults)] = True
    return flags


class LastRoot:
    """The root a batched env last returned, to give faulted rows their last observation."""

    def __init__(self, obs_keys: list[tuple], object_keys: list[tuple]) -> None:
        self.obs_keys, self.object_keys = obs_keys, object_keys  # tensor and object leaves
        self.root: TensorDictBase | None = None

    def after_reset(self, out: TensorDictBase, mask: np.ndarray | None) -> TensorDictBase:
        """Keep a reset's root (``mask``: the rows it reset; the others keep theirs) and
        return it with its ``"fault"`` flags (False)."""
        out = _with_flags(out, None)
        if mask is None or self.root is None:
            self.root = out
        else:
            rows = torch.from_numpy(np.asarray(mask, dtype=np.bool_).reshape(-1, 1))
            self.root = _merge_reset(self.root, out, rows)
        return out

    def after_step(
        self,
        next_out: TensorDictBase,
        faults: dict[int, str] | None,
        root: TensorDictBase | None = None,
    ) -> None:
        """Set ``("next", "fault")`` and the faulted rows' last observations in ``next_out``;
        keep the next step's root: ``root`` (given its ``"fault"`` flags, False: a faulted row
        was reset there), or ``next_out`` itself."""
        _with_flags(next_out, faults)
        if faults and self.root is not None:
            self._restore(next_out, self.root, sorted(faults))
        self.root = next_out if root is None else _with_flags(root, None)

    def _restore(self, next_out: TensorDictBase, last: TensorDictBase, rows: list[int]) -> None:
        mask = np.zeros(next_out.batch_size[0], dtype=np.bool_)
        mask[rows] = True
        for key in self.object_keys:
            copy_object_rows(next_out, last, key, mask.tolist())
        if not isinstance(next_out, LazyStackedTensorDict):
            for key in self.obs_keys:
                copy_rows(next_out.get(key), last.get(key), mask)
            return
        for row in rows:  # a multi-task batch: each row has its own keys
            source, dest = last.tensordicts[row], next_out.tensordicts[row]
            for key in self.obs_keys:
                if key in source.keys(include_nested=True):
                    dest.get(key).copy_(source.get(key))


def _with_flags(out: TensorDictBase, faults: dict[int, str] | None) -> TensorDictBase:
    out.set(FAULT_KEY, torch.from_numpy(fault_flags(out.batch_size[0], faults)))
    return out
