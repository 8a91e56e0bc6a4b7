"""Carrying out commands on sub-envs against rows of the buffers.

The mode bytes of a command (see ``commands.py``) are read here, in ``batch_step.py`` and in
``block.py`` (a block's rows): the same code runs in the calling process (``SerialEnv``, and a
``ParallelEnv``'s own share) and in every worker process.

A driver runs one sub-env: :class:`GymDriver` calls a gymnasium env directly,
:class:`TensorDictDriver` goes through a gymvec ``EnvBase``'s tensordict API. A
:class:`CommandRunner` carries out one command for a group of drivers, in phases: step the
sub-envs that step, reset into the root those that finished under AUTORESET, run the resets,
bring the root up to date where SYNC_ROOT asks. ``batch_step.py``'s ``BatchStep``
is the same runner for gymnasium sub-envs with one array observation and action.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gymvec.common.infos import InfoField
from gymvec.common.structure import (
    brief,
    build_value,
    get_leaf,
    leaf_name,
    missing_entry_error,
    observation_leaves,
    space_leaves,
)
from gymvec.errors import SpaceMismatchError
from gymvec.subenvs.kinds import gym_env_of, kind_of
from gymvec.wire.buffers import Buffers, Slot
from gymvec.wire.commands import (
    AUTORESET,
    KEEP_FINAL_OBS,
    NOTHING,
    RESET,
    RESET_INTO_NEXT,
    SEED,
    STEP,
    SYNC_ROOT,
    Extras,
)

# Worker processes import this module: torch and tensordict are imported only when a sub-env
# needs them (a gymvec EnvBase sub-env has already imported them by being built).


def final_obs_to_keep(value: Any, form: tuple | None) -> Any:
    """What KEEP_FINAL_OBS sends back of a finished sub-env's last observation ``value``:
    NOTHING where the buffer row the step wrote holds it exactly (an ndarray of the row's
    dtype and shape ``form``; the row is "next"'s own, or the observation lane's the command
    wrote), for front ends read it there; else ``value`` itself, as the sub-env returned
    it. Most steps that finish a sub-env then send nothing beside the buffers."""
    if type(value) is np.ndarray and (value.dtype, value.shape) == form:
        return NOTHING
    return value


def sync_root(root: Slot, next_: Slot, rows: Any, lane: int) -> None:
    """Copy "next" into the root at ``rows`` (buffer rows): SYNC_ROOT. In a command into an
    observation lane (``lane`` > 0), all but the observations: the lane holds them, its caller
    reads them there, and the engine books these rows' root as stale (a later SYNC_ROOT copies
    them from lane 0, which the runner gives the observations back first, see
    ``CommandRunner.use_lane``). So a step into a lane copies no observation twice."""
    root.copy_rows(next_, rows, observations=not lane)


def hand_over_lane(obs_lanes: list[np.ndarray], lane: int, rows: slice) -> None:
    """A command into observation lane ``lane`` was written into lane 0 (the "next" slot's own
    rows, where the sub-envs write): hand ``rows`` over to the lane."""
    obs_lanes[lane][rows] = obs_lanes[0][rows]


def _row_store(slot: Slot, leaf: Any) -> Any:
    return slot.objects[leaf.key] if leaf.is_object else slot.obs[leaf.key]


class GymDriver:
    """Runs one gymnasium sub-env on row ``index`` of the buffers, calling it directly."""

    def __init__(self, gym_env: gym.Env, index: int, buffers: Buffers):
        self.gym = gym_env
        self.index = index
        self.root, self.next = buffers.root, buffers.next
        self.rewards = buffers.reward
        layout = buffers.layout
        obs_leaves = observation_leaves(gym_env.observation_space)
        keys = [leaf.key for leaf in obs_leaves]
        batch_keys = layout.obs_keys + layout.object_obs_keys
        if not set(keys) <= set(batch_keys):  # a multi-task batch holds several tasks' keys
            raise SpaceMismatchError(
                f"sub-env {index}: observation keys {keys} are not in the batch's {batch_keys}",
                kind="observation",
            )
        self.obs_paths = [leaf.path for leaf in obs_leaves]
        self.obs_keys = keys
        # per leaf, its array in the buffers, or (object leaves) its list of this process
        self.root_obs = [_row_store(buffers.root, leaf) for leaf in obs_leaves]
        self.next_obs = [_row_store(buffers.next, leaf) for leaf in obs_leaves]
        # each array leaf's shape (None: an object leaf, which takes anything)
        self.obs_shapes = [
            store.shape[1:] if isinstance(store, np.ndarray) else None for store in self.next_obs
        ]
        self.plain_obs = len(self.obs_paths) == 1 and self.obs_paths[0] == ()
        # The dtype and shape of the one observation array (None: other observations): its
        # buffer row holds an ndarray observation of that form exactly (final_obs_to_keep).
        store = self.next_obs[0] if self.plain_obs else None
        self.obs_form = (store.dtype, store.shape[1:]) if isinstance(store, np.ndarray) else None
        self.action_space = gym_env.action_space
        self.action_leaves = space_leaves(gym_env.action_space, ("action",))
        self.action_arrays = [
            buffers.action_objects[leaf.key] if leaf.is_object else buffers.action[leaf.key]
            for leaf in self.action_leaves
        ]
        self.wide_actions = [buffers.wide_action.get(leaf.key) for leaf in self.action_leaves]
        self.discrete_action = isinstance(self.action_space, spaces.Discrete)
        self.fields: dict[str, InfoField] = layout.info_fields
        self.field_index = {name: k for k, name in enumerate(self.fields)}
        self.extras: Extras | None = None  # what the current command reported beside the buffers
        self.next_value: Any = None  # the observation of the last reset into "next"
        self.step_value: Any = None  # the observation of the last step
        self.last_value: Any = None  # the observation of the last step or reset

    def fields_changed(self) -> None:
        """Info fields were learnt (``self.fields`` is the layout's dict, grown in place)."""
        self.field_index = {name: k for k, name in enumerate(self.fields)}

    def write_obs_into(self, store: np.ndarray) -> None:
        """Write "next"'s observations into ``store`` from now on: an observation lane's array
        (a driver of one array observation: see :meth:`BatchStep.use_lane`)."""
        self.next_obs = [store]

    def read_action(self) -> Any:
        i = self.index
        if self.discrete_action:
            return self.action_arrays[0][i]  # a numpy scalar, as SyncVectorEnv passes
        arrays = [
            array[i]
            if leaf.is_object
            else np.array(wide[0][i] if wide is not None and wide[1][i] else array[i])
            for leaf, array, wide in zip(self.action_leaves, self.action_arrays, self.wide_actions)
        ]
        return build_value(self.action_space, self.action_leaves, arrays)

    def step(self) -> bool:
        i, slot = self.index, self.next
        obs, reward, terminated, truncated, info = self.gym.step(self.read_action())
        self.step_value = self.last_value = obs
        self._write_obs(self.next_obs, obs)
        try:
            done = bool(terminated or truncated)
            self.rewards[i] = reward
            slot.terminated[i] = terminated
            slot.truncated[i] = truncated
        except (ValueError, TypeError) as exc:
            raise transition_error([i], [reward], [terminated], [truncated]) from exc
        slot.done[i] = done
        if info or self.fields:
            self.write_info(slot, info)
        return done

    def reset(self, slot: Slot, seed: int | None, options: dict | None) -> None:
        i = self.index
        obs, info = self.gym.reset(seed=seed, options=options)
        self.last_value = obs
        if slot is self.next:
            self.next_value = obs
        self._write_obs(self.next_obs if slot is self.next else self.root_obs, obs)
        if slot.reward is not None:
            slot.reward[i] = 0.0
        slot.terminated[i] = slot.truncated[i] = slot.done[i] = False
        self.write_info(slot, info)

    def write_faulted(self, obs: Any) -> None:
        """This row's step where the sub-env before this driver's faulted: ``obs``, the last
        observation that one returned, into "next" (None: left as it is), and no info; the
        engine sets the reward and flags (``engine/healing.py``)."""
        self.step_value = self.last_value = obs
        if obs is not None:
            self._write_obs(self.next_obs, obs)
        self.write_info(self.next, {})

    def _write_obs(self, arrays: list[np.ndarray], obs: Any) -> None:
        # Shapes must match exactly, as SyncVectorEnv's np.stack wants (no broadcasting).
        try:
            if self.plain_obs:
                shape = self.obs_shapes[0]
                if shape is not None and np.shape(obs) != shape:
                    raise ValueError
                arrays[0][self.index] = obs
            else:
                for array, path, shape in zip(arrays, self.obs_paths, self.obs_shapes):
                    value = get_leaf(obs, path)
                    if shape is not None and np.shape(value) != shape:
                        raise ValueError
                    array[self.index] = value
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise self.observation_error(obs) from exc

    def observation_error(self, obs: Any) -> ValueError:
        """The error for an observation of this sub-env that does not fit its buffer rows:
        it names the sub-env, the key, the shape and dtype expected and those given."""
        who = f"sub-env {self.index}"
        for key, path, shape, store in zip(
            self.obs_keys, self.obs_paths, self.obs_shapes, self.next_obs
        ):
            if shape is None:
                continue
            try:
                value = np.asarray(get_leaf(obs, path))
            except (KeyError, IndexError, TypeError):
                return missing_entry_error(who, key, obs)
            except ValueError:  # ragged nested sequences
                return ValueError(f"{who} returned observation {leaf_name(key)!r} as {brief(obs)}")
            if value.shape != shape or not np.can_cast(value.dtype, store.dtype, "unsafe"):
                return ValueError(
                    f"{who} returned observation {leaf_name(key)!r} of shape {value.shape} and "
                    f"dtype {value.dtype}; its observation space has shape {shape} and dtype "
                    f"{store.dtype}"
                )
        return ValueError(f"{who} returned an observation its space cannot hold: {brief(obs)}")

    def write_info(self, slot: Slot, info: dict, cleared: bool = False) -> None:
        """Write ``info`` into this row of ``slot``: each entry with a field into its field (its
        flag set), the others into this command's extras. ``cleared``: the caller cleared this
        row's flags already (:class:`BatchStep` clears all its rows' at once)."""
        if not self.fields:
            if info:
                self._add_extras(slot, dict(info))
            return
        i = self.index
        present = slot.info_present[i]
        if not cleared:
            present[:] = False
        extras = {}
        for name, value in info.items():
            field = self.fields.get(name)
            if field is not None and field.accepts(value):
                slot.info[name][i] = value
                k = self.field_index[name]
                present[k] = True
                if field.ints:
                    slot.info_int[i, k] = type(value) is int
            else:
                extras[name] = value
        if extras:
            self._add_extras(slot, extras)

    def _add_extras(self, slot: Slot, entries: dict) -> None:
        if self.extras is None:
            self.extras = Extras()
        if slot is self.next:
            self.extras.next = entries
        else:
            self.extras.root = entries


class CommandRunner:
    """Carries out the mode bytes of one group of drivers (rows ``[start, start + n)``).

    Subclasses say how the stepping sub-envs step (:meth:`step_rows`); everything else about
    a command happens here, in this order: steps, autoresets of the sub-envs that finished,
    resets, copies of "next" into the root.
    """

    # (set by the group's healer, see subenvs/healing.py: None under on_fault "raise")
    on_fault: Callable[[int, Exception], None] | None = None

    def __init__(self, drivers: list[Any], buffers: Buffers, start: int):
        self.drivers = drivers
        self.start = start
        self.faulted: set[int] = set()  # rows that faulted in this command (healing)
        self.root, self.next = buffers.root, buffers.next
        # The observation lane (see BufferLayout) "next"'s observations go to, as the control
        # block's lane word says: the drivers write lane 0, and run() hands the rows over.
        self.lane = 0
        self.obs_lanes = buffers.obs_lanes
        self.rows = slice(start, start + len(drivers))

    def use_lane(self, lane: int) -> None:
        """Write "next"'s observations into observation lane ``lane`` from now on."""
        self.lane = lane

    def replace(self, k: int, driver: Any) -> None:
        """Row ``k``'s sub-env was rebuilt (healing): drive the new one."""
        self.drivers[k] = driver

    def fields_changed(self) -> None:
        """Info fields were learnt (see ``Buffers.add_info_fields``)."""
        for driver in self.drivers:
            driver.fields_changed()

    def step_rows(self, stepping: Sequence[int]) -> list[int]:
        """Step the sub-envs at ``stepping`` (group rows); returns those that finished. With
        ``on_fault``, a sub-env that raises is rebuilt and its row reads as faulted (not
        finished here: the engine resets it, see ``subenvs/healing.py``)."""
        drivers = self.drivers
        if self.on_fault is None:
            return [k for k in stepping if drivers[k].step()]
        done = []
        for k in stepping:
            try:
                if drivers[k].step():
                    done.append(k)
            except Exception as exc:
                last = drivers[k].last_value
                self.on_fault(k, exc)  # (a new driver in row k's place)
                drivers[k].write_faulted(last)
        return done

    def last_observation(self, k: int) -> Any:
        """The observation row ``k``'s sub-env returned from its last step, as it returned it."""
        return self.drivers[k].step_value

    def keep_final_obs(self, k: int) -> None:
        """KEEP_FINAL_OBS for row ``k``, which just finished: its last observation goes into
        its driver's extras, unless its buffer row holds it (see :func:`final_obs_to_keep`)."""
        driver = self.drivers[k]
        final = final_obs_to_keep(self.last_observation(k), driver.obs_form)
        if final is not NOTHING:
            if driver.extras is None:
                driver.extras = Extras()
            driver.extras.final_obs = final

    def run(self, modes: bytes, seeds: np.ndarray, options: dict | None) -> dict[int, Extras]:
        """Carry out ``modes`` (one byte per row); returns the extras by sub-env index."""
        extras = self.run_phases(modes, seeds, options)
        if self.lane:  # the drivers wrote lane 0: hand their rows over
            hand_over_lane(self.obs_lanes, self.lane, self.rows)
        return extras

    def run_phases(
        self, modes: bytes, seeds: np.ndarray, options: dict | None
    ) -> dict[int, Extras]:
        """Carry out ``modes`` phase by phase: steps, autoresets, resets, root syncs."""
        n = len(modes)
        drivers, root, next_ = self.drivers, self.root, self.next
        uniform = modes[0] if modes.count(modes[0]) == n else None
        if uniform is None:
            stepping: Sequence[int] = [k for k, mode in enumerate(modes) if mode & STEP]
        else:
            stepping = range(n) if uniform & STEP else ()
        done_rows = self.step_rows(stepping) if stepping else []
        rows = slice(self.start, self.start + n)
        # Every row's root follows "next" but those an autoreset overwrites just below
        # (SAME_STEP's step): one copy of the whole range costs less than an indexed one.
        synced = uniform is not None and uniform & SYNC_ROOT and not uniform & RESET
        if synced:
            self.sync_root(rows)
        root_written = [False] * n
        for k in done_rows:
            if modes[k] & AUTORESET:
                if modes[k] & KEEP_FINAL_OBS:
                    self.keep_final_obs(k)
                drivers[k].reset(root, None, None)
                root_written[k] = True
        if uniform is None or uniform & RESET:
            for k, mode in enumerate(modes):
                if mode & RESET:
                    into_next = mode & RESET_INTO_NEXT
                    seed = int(seeds[k]) if mode & SEED else None
                    try:
                        drivers[k].reset(next_ if into_next else root, seed, options)
                    except Exception as exc:
                        if self.on_fault is None:
                            raise
                        self.on_fault(k, exc)  # the engine resets it again, rebuilt
                        continue
                    root_written[k] = not into_next
                    if into_next:
                        self.reset_into_next(k)
        if not synced and (uniform is None or uniform & SYNC_ROOT):
            sync = [k for k, mode in enumerate(modes) if mode & SYNC_ROOT and not root_written[k]]
            if len(sync) == n:
                self.sync_root(rows)
            elif sync:
                self.sync_root([self.start + k for k in sync])
        return take_extras(drivers)

    def sync_root(self, rows: Any) -> None:
        """SYNC_ROOT at ``rows`` (buffer rows): see :func:`sync_root`."""
        sync_root(self.root, self.next, rows, self.lane)

    def reset_into_next(self, k: int) -> None:
        """Sub-env ``k`` was just reset into "next" (a hook for :class:`BatchStep`)."""


def transition_error(
    indices: Sequence[int], rewards: Sequence, terminations: Sequence, truncations: Sequence
) -> ValueError:
    """The error for a step result that is not a scalar reward and two scalar flags, naming
    the sub-env (of ``indices``, global) and the entry."""
    entries = (
        ("reward", rewards, "a number"),
        ("terminated", terminations, "a bool"),
        ("truncated", truncations, "a bool"),
    )
    for name, values, expected in entries:
        for index, value in zip(indices, values):
            try:
                fits = np.ndim(value) == 0 and np.asarray(value).dtype.kind in "biuf"
            except ValueError:  # ragged
                fits = False
            if not fits:
                return ValueError(
                    f"sub-env {index} returned {name} {brief(value)}; expected {expected}"
                )
    return ValueError(f"sub-envs {list(indices)} returned step results that cannot be stored")


def take_extras(drivers: Sequence[Any]) -> dict[int, Extras]:
    """The extras the drivers collected in a command, by sub-env index; clears them."""
    extras = {}
    for driver in drivers:
        if driver.extras is not None:
            extras[driver.index] = driver.extras
            driver.extras = None
    return extras


def make_driver(env: Any, index: int, buffers: Buffers) -> Any:
    """A :class:`GymDriver` for a gymnasium env (also inside a GymEnv), else the driver its
    registered kind makes (an EnvBase's: ``envs.sub_env_kind.TensorDictDriver``)."""
    gym_env = gym_env_of(env)
    if gym_env is not None:
        return GymDriver(gym_env, index, buffers)
    kind = kind_of(env)
    if kind is None:  # (check_sub_env refused such envs when the engine was made)
        raise TypeError(f"sub-env {index}: not a gymnasium.Env or gymvec EnvBase: {env!r}")
    return kind.make_driver(env, index, buffers)
