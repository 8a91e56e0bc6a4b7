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

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.common.arrays import all_set, any_set, copy_batch
from gymvec.common.structure import build_value, get_leaf, observation_leaves, space_leaves
from gymvec.errors import UnsupportedSpaceError
from gymvec.subenvs.drivers import hand_over_lane, sync_root
from gymvec.subenvs.kinds import SubEnvSummary
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire.buffers import Buffers, Slot
from gymvec.wire.commands import (
    RESET,
    RESET_INTO_NEXT,
    RESET_NEXT,
    SAME_STEP_MODES,
    SEED,
    STEP,
    SYNC_ROOT,
    Extras,
)

# The mode bytes of a step of a whole block (see BlockRunner.run), and two of them alone.
_WHOLE_STEPS = bytes([STEP, RESET_NEXT, SAME_STEP_MODES])
_STEP_BYTE, _SAME_STEP_BYTE = bytes([STEP]), bytes([SAME_STEP_MODES])
_RESET_NEXT_BYTE = bytes([RESET_NEXT])

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


def resets_finished_rows(summary: SubEnvSummary) -> bool:
    """Whether a sub-env is a NEXT_STEP block: one that resets its finished rows in its own
    step, whatever the mode bytes of those rows say."""
    return summary.block and block_mode(summary.metadata) is AutoresetMode.NEXT_STEP


def check_block_mode(summary: SubEnvSummary, requested: str, what: str) -> None:
    """A ValueError naming both modes where a block (``summary``) cannot carry out
    ``requested`` ("next_step", "same_step", "disabled", or "explicit": the tensordict API's
    resets by mask) exactly, and what to build instead."""
    mode = block_mode(summary.metadata)
    if requested in HONOURS[mode]:
        return
    if requested == "explicit":
        raise ValueError(_explicit_refusal(summary, mode, what))
    fits = [m.value for m, modes in HONOURS.items() if requested in modes]
    raise ValueError(
        f"{what}: a block whose autoreset mode is {mode.value} cannot be run with "
        f"autoreset mode {requested!r} exactly; build its vector env with "
        f"autoreset_mode={' or '.join(fits)} (gymnasium.make_vec's sync and async modes "
        "take vector_kwargs={'autoreset_mode': ...})"
    )


def _explicit_refusal(summary: SubEnvSummary, mode: AutoresetMode, what: str) -> str:
    """Why the tensordict API cannot run a block of autoreset ``mode``: what the user passed
    (their factory returned a gymnasium vector env), and what to build instead."""
    env_id = summary.env_spec.id if summary.env_spec is not None else None
    name = f"{env_id!r}" if env_id else "your env's id"
    block = f"{summary.type_name or 'a vector env'} of {summary.rows} rows"
    does = "in its next step" if mode is AutoresetMode.NEXT_STEP else "within the same step"
    return (
        f"{what}: create_env_fn returned a gymnasium vector env ({block}, "
        f"autoreset mode {mode.value}), which {what} runs as a block of rows. {what} resets "
        "sub-envs only when asked (reset() with '_reset', step_and_maybe_reset), but this "
        f"block resets its finished rows itself, {does}. Build instead either blocks that "
        f"leave resets to the caller, gymnasium.make_vec({name}, {summary.rows}, "
        "vectorization_mode='sync', vector_kwargs={'autoreset_mode': "
        "gymnasium.vector.AutoresetMode.DISABLED}) (a vector entry point such as "
        f"CartPole's has no autoreset option), or single envs, {what}(num_workers, "
        f"lambda: gymvec.GymEnv({name}), envs_per_worker=...)"
    )


def check_blocks(
    summaries: Sequence[SubEnvSummary],
    layout: WorkerLayout,
    requested: str,
    what: str,
    batch_size: int | None = None,
) -> None:
    """For each block among a batch's sub-envs (``summaries``, one per row), a ValueError
    naming both modes where it cannot carry out the ``requested`` autoreset ("next_step",
    "same_step", "disabled", or "explicit" for resets by mask alone) exactly; with
    first-ready batches of ``batch_size`` rows, unless every sub-env has the same size and
    it divides ``batch_size`` (a block's rows are sent and return together)."""
    blocks = {id(s): s for s in summaries if s.block}
    sizes = sorted(set(layout.rows_per_sub_env))
    if blocks and batch_size is not None and (len(sizes) > 1 or batch_size % sizes[0]):
        raise ValueError(
            f"{what}: first-ready batches over blocks send and return whole blocks: they "
            f"need blocks of one size and a batch_size that is a multiple of it; got "
            f"batch_size={batch_size} and sub-envs of {sizes} rows"
        )
    for summary in blocks.values():
        check_block_mode(summary, requested, what)


class BlockRunner:
    """Carries commands out on one block, rows ``[start, start + block.num_envs)`` (a
    ``group.Runner``, as the runners of single envs are).

    With ``on_fault`` (set by the group's healer, ``subenvs/healing.py``), a block that
    raises is rebuilt (:meth:`replace_block`) and the command ends for its rows, which it
    leaves unwritten (the engine gives them their last observation); until the rebuilt block
    is reset, a step of it is that reset (NEXT_STEP's first step after a fault)."""

    on_fault: Callable[[BlockRunner, Exception], None] | None = None

    def __init__(self, block: gym.vector.VectorEnv, start: int, buffers: Buffers):
        self.block = block
        self.start = start
        self.n = n = int(block.num_envs)
        self.rows = rows = slice(start, start + n)
        self.root, self.next = buffers.root, buffers.next
        self.lane = 0  # the observation lane "next"'s observations go to (see use_lane)
        self.obs_lanes = buffers.obs_lanes
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
        nxt = buffers.next  # each step's targets, sliced once
        self.transition_rows = (
            buffers.reward[rows],
            nxt.terminated[rows],
            nxt.truncated[rows],
            nxt.done[rows],
        )
        self.next_obs_rows = [nxt.obs[leaf.key][rows] for leaf in self.obs_leaves]
        self.root_obs_rows = [buffers.root.obs[leaf.key][rows] for leaf in self.obs_leaves]
        self.obs_labels = [f"observation {leaf.key}" for leaf in self.obs_leaves]
        self.extras: dict[int, Extras] = {}
        self.unreset = False  # a rebuilt block, not reset yet
        self.all_rows = np.ones(n, dtype=bool)
        self.all_step = bytes([STEP]) * n  # the mode bytes of the usual command
        # A block's optional step_into(actions, out): a step that writes its observations
        # (one array) into ``out``, here "next"'s rows, itself (PettingZooBlock's agents' images
        # skip a copy). Taken for the steps that write every row's observation into "next".
        self.step_into = None
        self.into_rows: np.ndarray | None = None
        step_into = getattr(block, "step_into", None)
        if callable(step_into) and [leaf.path for leaf in self.obs_leaves] == [()]:
            self.step_into = step_into
            self.into_rows = self.next_obs_rows[0]

    def use_lane(self, lane: int) -> None:
        """Hand "next"'s observations over to observation lane ``lane`` after each command."""
        self.lane = lane

    def fields_changed(self) -> None:
        self.field_index = {name: k for k, name in enumerate(self.fields)}

    def replace_block(self, block: gym.vector.VectorEnv) -> None:
        """The block was rebuilt from its factory (healing): run the new one, which is reset
        before it steps."""
        self.block = block
        if self.step_into is not None:  # (the same factory's block: it has one too)
            self.step_into = getattr(block, "step_into")  # noqa: B009 (not a VectorEnv's)
        self.unreset = True

    def sync_root(self, rows: Any) -> None:
        """SYNC_ROOT at ``rows`` (buffer rows): see ``drivers.sync_root``."""
        sync_root(self.root, self.next, rows, self.lane)

    # ---- the command --------------------------------------------------------------------------
    def run(self, modes: bytes, seeds: np.ndarray, options: dict | None) -> dict[int, Extras]:
        # (C passes over the bytes, not numpy masks; the usual command takes one compare)
        same_step = False
        whole_step = modes == self.all_step
        if not whole_step:
            same_step = _SAME_STEP_BYTE in modes
            whole_step = (same_step or _STEP_BYTE in modes) and not modes.translate(
                None, _WHOLE_STEPS
            )
        if not whole_step and not modes.strip(b"\0"):
            return {}
        self.extras = {}
        try:
            if whole_step and not self.unreset:
                self._step(modes, same_step, options)
            elif whole_step:  # the rebuilt block's first step resets it (see the class)
                self._reset(self.next, self.all_rows, np.frombuffer(modes, np.uint8), seeds, None)
            else:  # (resets, all of them into "next" too: RESET_NEXT alone steps nothing)
                self._resets(np.frombuffer(modes, dtype=np.uint8), seeds, options)
        except Exception as exc:
            if self.on_fault is None:
                raise
            self.on_fault(self, exc)  # rebuilt; the engine books it, restores the rows
            self.extras = {}
            self.next.info_present[self.rows] = False
        if self.lane:
            hand_over_lane(self.obs_lanes, self.lane, self.rows)
        extras, self.extras = self.extras, {}
        return extras

    def _resets(self, codes: np.ndarray, seeds: np.ndarray, options: dict | None) -> None:
        """A command that steps no row: resets, and the root synced where SYNC_ROOT asks."""
        if (codes & STEP).any():
            raise ValueError(
                f"{self.what}: a block steps all its rows at once; this command steps rows "
                f"{(np.flatnonzero(codes & STEP) + self.start).tolist()} only"
            )
        resetting = (codes & RESET).astype(bool)
        root_written = np.zeros(self.n, dtype=bool)
        if resetting.any():
            into = (codes[resetting] & RESET_INTO_NEXT).astype(bool)
            if into.all() != into.any():
                raise ValueError(f"{self.what}: its rows reset into both slots in one command")
            self._reset(self.next if into[0] else self.root, resetting, codes, seeds, options)
            root_written = resetting & (not into[0])
        sync = (codes & SYNC_ROOT).astype(bool) & ~root_written
        if sync.all():
            self.sync_root(self.rows)
        elif sync.any():
            self.sync_root((np.flatnonzero(sync) + self.start).tolist())

    def _step(self, modes: bytes, same_step: bool, options: dict | None) -> None:
        """A step of every row (STEP; RESET_NEXT rows the NEXT_STEP block resets itself in
        place of their step; or, ``same_step``, SAME_STEP_MODES: the rows that finish reset
        into the root)."""
        if same_step and modes.count(_SAME_STEP_BYTE) != self.n:
            raise ValueError(f"{self.what}: only some of its rows step with SAME_STEP resets")
        if _RESET_NEXT_BYTE in modes and self.mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(f"{self.what}: NEXT_STEP resets need a NEXT_STEP block")
        into = None if same_step else self.into_rows  # (None unless the block has step_into)
        if into is not None and self.step_into is not None:
            obs, rewards, terminations, truncations, infos = self.step_into(
                self._read_actions(), into
            )
        else:
            obs, rewards, terminations, truncations, infos = self.block.step(self._read_actions())
        final_obs = final_info = None
        if self.mode is AutoresetMode.SAME_STEP:
            infos = dict(infos)
            final_obs, final_info = infos.pop("final_obs", None), infos.pop("final_info", None)
            infos.pop("_final_obs", None)
            infos.pop("_final_info", None)
        done = self._write_transition(rewards, terminations, truncations)
        if not same_step or not any_set(done):
            if obs is not into:  # (step_into wrote them in place)
                self._write_obs(self.next, obs, self.all_rows)
            self._write_infos(self.next, infos, self.all_rows)
            if same_step:
                self.sync_root(self.rows)
            return
        if self.mode is AutoresetMode.SAME_STEP:
            # the block returned its first observations for the rows it reset, and their last
            # ones in final_obs: the transition ends in those, the root starts from these
            self._write_obs(self.next, obs, ~done)
            self._write_final_obs(final_obs, done)
            self._write_infos(self.next, infos, ~done)
            if final_info is not None:
                self._write_infos(self.next, final_info, done)
            self.sync_root(self.rows)  # then the reset rows' root is overwritten
            self._write_obs(self.root, obs, done)
            self._write_infos(self.root, infos, done)
            self._clear_flags(self.root, done)
        else:  # a DISABLED block: the rows that finished reset into the root now
            self._write_obs(self.next, obs, self.all_rows)
            self._write_infos(self.next, infos, self.all_rows)
            self.sync_root(self.rows)
            self._reset(self.root, done, np.zeros(self.n, np.uint8), None, options)

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
        self.unreset = False
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
        array = value if type(value) is np.ndarray else np.asarray(value)
        if array.shape[:1] != (self.n,) or (tail and array.shape[1:] != tail):
            raise ValueError(
                f"{self.what} returned {name} of shape {array.shape}; expected {(self.n, *tail)}"
            )
        return array

    def _write_transition(self, rewards: Any, terminations: Any, truncations: Any) -> np.ndarray:
        reward, terminated, truncated, done = self.transition_rows
        reward[...] = self._check_length("rewards", rewards, ())
        terminated[...] = self._check_length("terminations", terminations)
        truncated[...] = self._check_length("truncations", truncations)
        np.logical_or(terminated, truncated, out=done)
        return done.copy()

    def _clear_flags(self, slot: Slot, rows: np.ndarray) -> None:
        for flags in (slot.terminated, slot.truncated, slot.done):
            flags[self.rows][rows] = False

    def _write_obs(self, slot: Slot, obs: Any, rows: np.ndarray) -> None:
        everyone = rows is self.all_rows or all_set(rows)
        targets = self.next_obs_rows if slot is self.next else self.root_obs_rows
        for leaf, target, label in zip(self.obs_leaves, targets, self.obs_labels):
            value = self._check_length(label, get_leaf(obs, leaf.path), target.shape[1:])
            if everyone:
                copy_batch(target, value)
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
        if not infos and not self.fields:
            return
        present = slot.info_present[self.rows]
        everyone = rows is self.all_rows  # (a step's infos: most entries cover every row)
        present[slice(None) if everyone else rows] = False
        per_row: dict[int, dict] = {}
        for name, values in infos.items():
            if name.startswith("_"):
                continue
            given = infos.get(f"_{name}")
            whole = everyone and (given is None or all_set(given))
            mask = rows if whole or given is None else rows & np.asarray(given, dtype=bool)
            if not whole and not mask.any():
                continue
            field = self.fields.get(name)
            if field is not None and isinstance(values, np.ndarray) and _fits(values, field):
                if whole:
                    slot.info[name][self.rows] = values
                    present[:, self.field_index[name]] = True
                else:
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
