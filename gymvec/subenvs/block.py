"""A block: a gymnasium vector env as one sub-env of ``num_envs`` rows.

:class:`BlockRunner` carries a command's mode bytes out on a block's rows with one call of the
block (a step, or a reset), and writes its batched results into the rows with one numpy write
per field: no Python loop over rows on the way in or out (infos that have no buffer field yet
go back per row, as a single env's do).

A block steps all its rows at once, so the engine plans its autoreset in the block's own
mode: NEXT_STEP rows reset by the block in place of a step (``RESET_NEXT``), SAME_STEP rows
reset into the root within the step (the block's ``final_obs``/``final_info``, or a DISABLED
block's ``reset(options={"reset_mask": done})``), explicit resets through ``reset_mask``.
:func:`check_block_mode` says which requested modes a block's own mode honours exactly.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.common.structure import build_value, get_leaf, observation_leaves, space_leaves
from gymvec.errors import UnsupportedSpaceError
from gymvec.subenvs.drivers import CommandRunner
from gymvec.wire.buffers import Buffers, Slot
from gymvec.wire.commands import (
    AUTORESET,
    RESET,
    RESET_INTO_NEXT,
    RESET_NEXT,
    SEED,
    STEP,
    SYNC_ROOT,
    Extras,
)

# The requested modes (the front end's autoreset, "explicit": resets only when asked) that a
# block of each mode carries out exactly.
HONOURS: dict[AutoresetMode, frozenset[str]] = {
    AutoresetMode.NEXT_STEP: frozenset({"next_step"}),
    AutoresetMode.SAME_STEP: frozenset({"same_step"}),
    AutoresetMode.DISABLED: frozenset({"same_step", "disabled", "explicit"}),
}


def block_mode(metadata: dict) -> AutoresetMode:
    """A block's own autoreset mode (gymnasium's default where its metadata says none)."""
    mode = metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)


def check_block_mode(metadata: dict, requested: str, what: str) -> None:
    """A ValueError naming both modes where a block of ``metadata``'s autoreset mode cannot
    carry out ``requested`` ("next_step", "same_step", "disabled", or "explicit": the
    tensordict API's resets by mask) exactly."""
    mode = block_mode(metadata)
    if requested not in HONOURS[mode]:
        fits = [m.value for m, modes in HONOURS.items() if requested in modes]
        raise ValueError(
            f"{what}: a block whose autoreset mode is {mode.value} cannot be run with "
            f"autoreset mode {requested!r} exactly; build its vector env with "
            f"autoreset_mode={' or '.join(fits)} (for gymnasium.make_vec: "
            f"vector_kwargs={{'autoreset_mode': ...}})"
        )


class BlockRunner(CommandRunner):
    """Carries commands out on one block, rows ``[start, start + block.num_envs)``."""

    def __init__(self, block: gym.vector.VectorEnv, start: int, buffers: Buffers):
        super().__init__([], buffers, start)
        self.block = block
        self.n = n = int(block.num_envs)
        self.rows = rows = slice(start, start + n)
        self.mode = block_mode(block.metadata or {})
        self.what = f"the block at rows {start}..{start + n - 1} ({type(block).__name__})"
        self.obs_leaves = observation_leaves(block.single_observation_space)
        self.action_space = block.single_action_space
        self.action_leaves = space_leaves(self.action_space, ("action",))
        if any(leaf.is_object for leaf in self.obs_leaves + self.action_leaves):
            raise UnsupportedSpaceError(
                f"{self.what}: blocks need observations and actions of fixed shape"
            )
        self.plain_action = not isinstance(self.action_space, gym.spaces.Dict | gym.spaces.Tuple)
        self.actions = [buffers.action[leaf.key][rows] for leaf in self.action_leaves]
        self.wide = [buffers.wide_action.get(leaf.key) for leaf in self.action_leaves]
        self.fields = buffers.layout.info_fields
        self.field_index = {name: k for k, name in enumerate(self.fields)}
        self.reward = buffers.reward
        self.extras: dict[int, Extras] = {}
        self.all_rows = np.ones(n, dtype=bool)

    def fields_changed(self) -> None:
        self.field_index = {name: k for k, name in enumerate(self.fields)}

    # ---- the command --------------------------------------------------------------------------
    def run(self, modes: bytes, seeds: np.ndarray, options: dict | None) -> dict[int, Extras]:
        codes = np.frombuffer(modes, dtype=np.uint8)
        if not codes.any():
            return {}
        self.extras = {}
        stepping = (codes & STEP).astype(bool)
        root_written = np.zeros(self.n, dtype=bool)
        if stepping.any():
            root_written = self._step(codes, stepping, options)
        else:
            resetting = (codes & RESET).astype(bool)
            if resetting.any():
                into_next = self._same_for_all(codes, resetting, RESET_INTO_NEXT, "reset into")
                self._reset(self.next if into_next else self.root, resetting, codes, seeds, options)
                root_written = resetting & (not into_next)
        sync = (codes & SYNC_ROOT).astype(bool) & ~root_written
        if sync.all():
            self.sync_root(self.rows)
        elif sync.any():
            self.sync_root((np.flatnonzero(sync) + self.start).tolist())
        if self.lane:  # written into lane 0 (the "next" slot's own rows): hand them over
            self.obs_lanes[self.lane][self.rows] = self.obs_lanes[0][self.rows]
        extras, self.extras = self.extras, {}
        return extras

    def _same_for_all(self, codes: np.ndarray, rows: np.ndarray, flag: int, what: str) -> bool:
        values = (codes[rows] & flag).astype(bool)
        if values.all() != values.any():
            raise ValueError(f"{self.what}: its rows differ in {what} within one command")
        return bool(values[0])

    def _step(self, codes: np.ndarray, stepping: np.ndarray, options: dict | None) -> np.ndarray:
        """Step the block; returns the rows whose root the step wrote (SAME_STEP resets)."""
        resetting = (codes & RESET).astype(bool)
        if not (stepping | resetting).all() or (resetting & (codes != RESET_NEXT)).any():
            raise ValueError(
                f"{self.what}: a block steps all its rows at once; this command steps rows "
                f"{(np.flatnonzero(stepping) + self.start).tolist()} only"
            )
        if resetting.any() and self.mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(f"{self.what}: NEXT_STEP resets need a NEXT_STEP block")
        obs, rewards, terminations, truncations, infos = self.block.step(self._read_actions())
        final_obs = final_info = None
        if self.mode is AutoresetMode.SAME_STEP:
            infos = dict(infos)
            final_obs, final_info = infos.pop("final_obs", None), infos.pop("final_info", None)
            infos.pop("_final_obs", None)
            infos.pop("_final_info", None)
        done = self._write_transition(rewards, terminations, truncations)
        autoreset = done & (codes & AUTORESET).astype(bool)
        if not autoreset.any():
            self._write_obs(self.next, obs, self.all_rows)
            self._write_infos(self.next, infos, self.all_rows)
            return np.zeros(self.n, dtype=bool)
        if self.mode is AutoresetMode.SAME_STEP:
            # the block returned its first observations for the rows it reset, and their last
            # ones in final_obs: the transition ends in those, the root starts from these
            self._write_obs(self.root, obs, autoreset)
            self._write_infos(self.root, infos, autoreset)
            self._clear_flags(self.root, autoreset)
            self._write_obs(self.next, obs, ~autoreset)
            self._write_final_obs(final_obs, autoreset)
            self._write_infos(self.next, infos, ~autoreset)
            if final_info is not None:
                self._write_infos(self.next, final_info, autoreset)
        else:  # a DISABLED block: the rows that finished reset into the root now
            self._write_obs(self.next, obs, self.all_rows)
            self._write_infos(self.next, infos, self.all_rows)
            self.sync_root(self.rows)
            self._reset(self.root, autoreset, np.zeros(self.n, np.uint8), None, options)
        return autoreset

    def _reset(
        self,
        slot: Slot,
        rows: np.ndarray,
        codes: np.ndarray,
        seeds: np.ndarray | None,
        options: dict | None,
    ) -> None:
        seeded = (codes & SEED).astype(bool) & rows
        seed = _block_seed(seeds, seeded, rows) if seeded.any() else None
        if not rows.all():
            options = {**(options or {}), "reset_mask": rows.copy()}
        obs, infos = self.block.reset(seed=seed, options=options)
        self._write_obs(slot, obs, rows)
        if slot.reward is not None:
            slot.reward[self.rows][rows] = 0.0
        self._clear_flags(slot, rows)
        self._write_infos(slot, infos, rows)

    # ---- reading and writing rows -------------------------------------------------------------
    def _read_actions(self) -> Any:
        arrays = []
        for narrow, wide in zip(self.actions, self.wide):
            if wide is not None and wide[1][self.start]:
                arrays.append(wide[0][self.rows].copy())
            else:
                arrays.append(narrow.copy())  # the block may keep what it is handed
        return (
            arrays[0]
            if self.plain_action
            else build_value(self.action_space, self.action_leaves, arrays)
        )

    def _check_length(self, name: str, value: Any, tail: tuple = ()) -> np.ndarray:
        array = np.asarray(value)
        if array.shape[:1] != (self.n,) or (tail and array.shape[1:] != tail):
            raise ValueError(
                f"{self.what} returned {name} of shape {array.shape}; expected {(self.n, *tail)}"
            )
        return array

    def _write_transition(self, rewards: Any, terminations: Any, truncations: Any) -> np.ndarray:
        rows, slot = self.rows, self.next
        self.reward[rows] = self._check_length("rewards", rewards, ())
        slot.terminated[rows] = self._check_length("terminations", terminations)
        slot.truncated[rows] = self._check_length("truncations", truncations)
        done = slot.done[rows]
        np.logical_or(slot.terminated[rows], slot.truncated[rows], out=done)
        return done.copy()

    def _clear_flags(self, slot: Slot, rows: np.ndarray) -> None:
        for flags in (slot.terminated, slot.truncated, slot.done):
            flags[self.rows][rows] = False

    def _write_obs(self, slot: Slot, obs: Any, rows: np.ndarray) -> None:
        everyone = rows.all()
        for leaf in self.obs_leaves:
            target = slot.obs[leaf.key][self.rows]
            value = self._check_length(
                f"observation {leaf.key}", get_leaf(obs, leaf.path), target.shape[1:]
            )
            if everyone:
                target[...] = value
            else:
                target[rows] = value[rows]

    def _write_final_obs(self, final_obs: Any, rows: np.ndarray) -> None:
        if final_obs is None:
            raise ValueError(f"{self.what}: a SAME_STEP block reset rows without final_obs")
        for k in np.flatnonzero(rows).tolist():
            value = final_obs[k]
            for leaf in self.obs_leaves:
                self.next.obs[leaf.key][self.start + k] = get_leaf(value, leaf.path)

    def _write_infos(self, slot: Slot, infos: dict, rows: np.ndarray) -> None:
        """gymnasium's vector infos (an array per entry and a ``_name`` mask) into the rows
        ``rows`` marks: learnt fields with one write each, other entries per row as extras."""
        present = slot.info_present[self.rows]
        present[rows] = False
        per_row: dict[int, dict] = {}
        for name, values in infos.items():
            if name.startswith("_"):
                continue
            mask = infos.get(f"_{name}")
            mask = rows if mask is None else rows & np.asarray(mask, dtype=bool)
            if not mask.any():
                continue
            field = self.fields.get(name)
            if field is not None and isinstance(values, np.ndarray) and _fits(values, field):
                slot.info[name][self.rows][mask] = values[mask]
                present[mask, self.field_index[name]] = True
                continue
            for k in np.flatnonzero(mask).tolist():
                per_row.setdefault(k, {})[name] = _row_value(values, k)
        for k, entries in per_row.items():
            extras = self.extras.setdefault(self.start + k, Extras())
            if slot is self.next:
                extras.next = entries
            else:
                extras.root = entries


def _fits(values: np.ndarray, field: Any) -> bool:
    return values.shape[1:] == field.shape and np.can_cast(values.dtype, field.dtype, "same_kind")


def _row_value(values: Any, k: int) -> Any:
    """Row ``k`` of a vector info entry (a nested dict of entries holds its own masks)."""
    if isinstance(values, dict):
        return {
            name: _row_value(value, k)
            for name, value in values.items()
            if not name.startswith("_") and values.get(f"_{name}", np.ones(k + 1, bool))[k]
        }
    value = values[k]
    return value.item() if isinstance(value, np.generic) else value


def _block_seed(seeds: np.ndarray | None, seeded: np.ndarray, rows: np.ndarray) -> Any:
    """The ``seed`` argument that gives each seeded row its seed: an int where they follow
    gymnasium's ``seed + row``, else a list (None for the rows not seeded)."""
    if seeds is None:
        return None
    values = np.asarray(seeds, dtype=np.int64)
    positions = np.flatnonzero(seeded)
    base = int(values[positions[0]]) - int(positions[0])
    if base >= 0 and bool((values[positions] == base + positions).all()):
        return base  # (the rows a reset mask leaves out are not reset: their seeds go unused)
    return [int(values[k]) if seeded[k] else None for k in range(len(values))]
