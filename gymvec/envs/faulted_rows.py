"""Faults that heal on the tensordict side (API section 13): the ``"fault"`` flag and the last
observation of the rows the engine rebuilt.

With ``on_fault`` restarting, a batched env's done spec carries a bool ``"fault"`` entry
(trailing dim of 1, as the other flags): ``("next", "fault")`` is True on the rows whose
sub-env faulted in that step and False elsewhere, and False at the root after a reset. The
engine reads a faulted row as truncated with reward 0, but leaves its observation to the front
end: :class:`LastRoot` keeps the root each call returned (a reference, no copy) and gives the
faulted rows of ``"next"`` their last observation from it. :class:`FaultedRows` is
``BatchedEnvBase``'s part of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from gymvec.envs.base import _merge_reset, copy_object_rows, copy_rows
from gymvec.specs import Categorical, Composite

if TYPE_CHECKING:
    from gymvec.engine.engine import BatchEngine
    from gymvec.wire.calls import Received

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


class FaultedRows:
    """``BatchedEnvBase``'s part of faults that heal: the ``"fault"`` flag in its done spec and
    outputs, the faulted rows' last observation, ``last_faults``, and a ``step_and_maybe_reset``
    that restores faulted rows, in the class's place. Nothing of it runs without ``on_fault``."""

    # by row, the message of each fault healed in the last step (None: none)
    last_faults: dict[int, str] | None = None
    _last_root: LastRoot | None = None

    if TYPE_CHECKING:
        engine: BatchEngine
        done_spec: Composite
        batch_size: torch.Size

        def step_and_maybe_reset(
            self, td: TensorDictBase
        ) -> tuple[TensorDictBase, TensorDictBase]: ...

    def _fault_specs(self) -> None:
        """With ``on_fault`` restarting: the ``"fault"`` flag, and the last roots kept."""
        if self.engine.fault_book is not None:
            self.done_spec = with_fault_spec(self.done_spec, self.batch_size)
            layout = self.engine.layout
            self._last_root = LastRoot(list(layout.obs_keys), list(layout.object_obs_keys))
            # this env's step_and_maybe_reset restores faulted rows; without on_fault the
            # class's runs alone (no call in between: the tensordict step path counts them)
            self.step_and_maybe_reset = self._step_and_maybe_reset_healing  # type: ignore[method-assign]

    def _reset_root(self, out: TensorDictBase, mask: np.ndarray | None) -> TensorDictBase:
        """A reset's output ``out`` (of the rows ``mask`` names, None: all), flagged."""
        return out if self._last_root is None else self._last_root.after_reset(out, mask)

    def _step_next(self, next_out: TensorDictBase, received: Received) -> TensorDictBase:
        """A step's ``"next"`` output, its faulted rows given their last observation."""
        self.last_faults = received.faults
        if self._last_root is not None:
            self._last_root.after_step(next_out, received.faults)
        return next_out

    def _flag_first_ready(
        self,
        out: TensorDictBase,
        rows: np.ndarray,
        faults: dict[int, str] | None = None,
        sent: TensorDictBase | None = None,
    ) -> None:
        """A first-ready output ``out`` (a reset's root, or a step's ``"next"``, of the
        sub-envs ``rows``), flagged; a step's faulted rows get their last observation from
        ``sent``, the rows as sent (where they hold one)."""
        if sent is not None:
            self.last_faults = faults
        if self._last_root is None:
            return
        flags = np.zeros((len(rows), 1), dtype=np.bool_)
        if faults:
            flags[:, 0] = [row in faults for row in rows.tolist()]
        out.set(FAULT_KEY, torch.from_numpy(flags).to(out.device))
        if not faults or sent is None:
            return
        in_sent = sent.keys(include_nested=True, leaves_only=True)
        mask = flags[:, 0]
        for key in self._last_root.object_keys:
            if key in in_sent:
                copy_object_rows(out, sent, key, mask.tolist())
        for key in self._last_root.obs_keys:
            if key in in_sent:
                copy_rows(out.get(key), sent.get(key), mask)

    def _step_and_maybe_reset_healing(
        self, td: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """The class's ``step_and_maybe_reset``, then the faulted rows' last observations."""
        td, root = type(self).step_and_maybe_reset(self, td)
        if self._last_root is not None:
            self._last_root.after_step(td.get("next"), self.last_faults, root)
        return td, root
