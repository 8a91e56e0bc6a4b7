"""Stepping sub-envs against rows of the shared buffers.

This is the one implementation of "what happens to a sub-env in a batched step", used by
``SerialEnv`` in the calling process and by each ``ParallelEnv`` worker in its own process.

The parent writes one :class:`Mode` byte per sub-env into the control block, and the sub-env's
driver carries it out: step, reset, reset when done, copy ``next`` to the root. A single
command can so mix "step these" and "reset those", which is what one round trip per step
needs (gymnasium's NEXT_STEP autoreset resets some sub-envs while stepping the others).
"""

from __future__ import annotations

import enum
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gymvec.arrays import any_set
from gymvec.batched.buffers import Buffers, Slot, as_buffer
from gymvec.envs.infos import InfoField
from gymvec.envs.structure import (
    brief,
    build_value,
    get_leaf,
    leaf_name,
    missing_entry_error,
    observation_leaves,
    space_leaves,
)
from gymvec.errors import SpaceMismatchError, UnsupportedSpaceError

# Worker processes import this module: torch and tensordict are imported only when a sub-env
# needs them (a gymvec EnvBase sub-env has already imported them by being built).


class Mode(enum.IntFlag):
    """What a sub-env does in one command (combinable)."""

    STEP = 1  # step with the action in the buffers; the transition goes to "next"
    RESET = 2  # reset; the result goes to the root (or to "next" with RESET_INTO_NEXT)
    AUTORESET = 4  # with STEP: if the sub-env finished, reset it into the root
    SYNC_ROOT = 8  # root <- next for a sub-env that was not reset in this command
    RESET_INTO_NEXT = 16  # resets write "next": reset obs and info, reward 0, flags False
    SEED = 32  # RESET uses the seed in the control block
    KEEP_FINAL_OBS = 64  # with AUTORESET: a finished sub-env's last observation, as it returned
    # it, goes to its extras under "final_obs" (gymnasium's SAME_STEP hands that object out)


# Plain ints for the hot loops: IntFlag arithmetic costs microseconds per operation.
_STEP, _RESET, _AUTORESET = int(Mode.STEP), int(Mode.RESET), int(Mode.AUTORESET)
_SYNC_ROOT, _RESET_INTO_NEXT, _SEED = int(Mode.SYNC_ROOT), int(Mode.RESET_INTO_NEXT), int(Mode.SEED)
_KEEP_FINAL_OBS = int(Mode.KEEP_FINAL_OBS)


def _loaded_class(module: str, name: str) -> type | None:
    """A gymvec class, if its module is loaded (an instance of it implies that it is)."""
    loaded = sys.modules.get(module)
    return getattr(loaded, name) if loaded is not None else None


def gym_env_of(env: Any) -> gym.Env | None:
    """The gymnasium env a sub-env runs: itself, the env inside a GymEnv, or None."""
    if isinstance(env, gym.Env):
        return env
    gym_env_class = _loaded_class("gymvec.envs.gym_env", "GymEnv")
    if gym_env_class is not None and isinstance(env, gym_env_class):
        return env.env
    return None


def check_sub_env(env: Any) -> Any:
    """``env`` if it is a gymnasium.Env or a gymvec EnvBase, else a TypeError."""
    env_base = _loaded_class("gymvec.envs.base", "EnvBase")
    if isinstance(env, gym.Env) or (env_base is not None and isinstance(env, env_base)):
        return env
    raise TypeError(
        f"create_env_fn must return a gymvec EnvBase or a gymnasium.Env, got {type(env)!r}"
    )


def describe_sub_env(env: Any) -> dict:
    """What the parent needs to know of a sub-env built elsewhere (picklable, torch-free for
    gymnasium sub-envs)."""
    gym_env = gym_env_of(env)
    if gym_env is not None:
        return {
            "observation_space": gym_env.observation_space,
            "action_space": gym_env.action_space,
            "metadata": dict(gym_env.metadata or {}),
            "render_mode": gym_env.render_mode,
            "env_spec": gym_env.spec,
        }
    return {
        "observation_spec": env.observation_spec,
        "full_action_spec": env.full_action_spec,
        "reward_dtype": env.reward_spec.dtype,
    }


def _row_store(slot: Slot, leaf: Any) -> Any:
    return slot.objects[leaf.key] if leaf.is_object else slot.obs[leaf.key]


class Control:
    """A command's arguments: per sub-env a ``mode`` (uint8) and a ``seed`` (int64), and the
    observation ``lane`` (int64, see ``BufferLayout``) that "next"'s observations go to."""

    def __init__(self, num_envs: int, memory: Any):
        flat = np.frombuffer(as_buffer(memory), dtype=np.uint8, count=Control.nbytes(num_envs))
        self.lane = flat[:8].view(np.int64)
        self.seed = flat[8 : 8 + 8 * num_envs].view(np.int64)
        self.mode = flat[8 + 8 * num_envs : 8 + 9 * num_envs]

    @staticmethod
    def nbytes(num_envs: int) -> int:
        return 8 + 9 * num_envs


class GymDriver:
    """Runs one gymnasium sub-env on row ``index`` of the buffers, calling it directly."""

    def __init__(self, gym_env: gym.Env, index: int, buffers: Buffers):
        self.gym = gym_env
        self.index = index
        self.root, self.next = buffers.root, buffers.next
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
        self.extras: dict[str, dict] = {}
        self.next_value: Any = None  # the observation of the last reset into "next"
        self.step_value: Any = None  # the observation of the last step

    def run(self, mode: int, seed: int | None, options: dict | None) -> None:
        if mode & _STEP:
            done = self.step()
            if done and mode & _AUTORESET:
                if mode & _KEEP_FINAL_OBS:
                    self.extras["final_obs"] = self.step_value
                self.reset(self.root, None, None)
            elif mode & _SYNC_ROOT:
                self.root.copy_rows(self.next, self.index)
        if mode & _RESET:
            self.reset(self.next if mode & _RESET_INTO_NEXT else self.root, seed, options)
        elif mode & _SYNC_ROOT and not mode & _STEP:
            self.root.copy_rows(self.next, self.index)

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
        self.step_value = obs
        self._write_obs(self.next_obs, obs)
        try:
            done = bool(terminated or truncated)
            slot.reward[i] = reward
            slot.terminated[i] = terminated
            slot.truncated[i] = truncated
        except (ValueError, TypeError) as exc:
            raise transition_error([i], [reward], [terminated], [truncated]) from exc
        slot.done[i] = done
        if info or self.fields:
            self._write_info(slot, "next", info)
        return done

    def reset(self, slot: Slot, seed: int | None, options: dict | None) -> None:
        i = self.index
        obs, info = self.gym.reset(seed=seed, options=options)
        if slot is self.next:
            self.next_value = obs
        self._write_obs(self.next_obs if slot is self.next else self.root_obs, obs)
        if slot.reward is not None:
            slot.reward[i] = 0.0
        slot.terminated[i] = slot.truncated[i] = slot.done[i] = False
        self._write_info(slot, "next" if slot is self.next else "root", info)

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

    def _write_info(self, slot: Slot, slot_name: str, info: dict) -> None:
        if not self.fields:
            if info:
                self.extras[slot_name] = dict(info)
            return
        i = self.index
        present = slot.info_present[i]
        present[:] = False
        extras = {}
        for name, value in info.items():
            field = self.fields.get(name)
            if field is not None and field.accepts(value):
                slot.info[name][i] = value
                present[self.field_index[name]] = True
            else:
                extras[name] = value
        if extras:
            self.extras[slot_name] = extras


class TensorDictDriver:
    """Runs any EnvBase sub-env (batch size ``()``) through its tensordict API.

    Slower than :class:`GymDriver` (a TensorDict per call), but works for every EnvBase.
    """

    def __init__(self, env: Any, index: int, buffers: Buffers):
        if tuple(env.batch_size) != ():
            raise ValueError(f"sub-envs must have batch_size (), got {tuple(env.batch_size)}")
        layout = buffers.layout
        if layout.object_obs_keys or layout.object_action_keys:
            raise UnsupportedSpaceError(
                f"sub-env {index}: keys {layout.object_obs_keys + layout.object_action_keys} "
                "hold Python objects (NonTensor specs), which batches carry for gymnasium "
                "sub-envs and GymEnv only"
            )
        self.env = env
        self.index = index
        self.root, self.next = buffers.root, buffers.next
        self.td = buffers.tensordict()[index]
        self.action_keys = [("action", *key[1:]) for key in buffers.layout.action_keys]
        # float64 actions from the gymnasium face, cast into the leaf's own buffer before use
        self.wide_actions = [
            (buffers.action[key], *wide) for key, wide in buffers.wide_action.items()
        ]
        self.fields = buffers.layout.info_fields
        self.extras: dict[str, dict] = {}
        self._pending_seed: int | None = None

    def run(self, mode: int, seed: int | None, options: dict | None) -> None:
        if mode & _STEP:
            done = self.step()
            if done and mode & _AUTORESET:
                self.reset(self.root, None)
            elif mode & _SYNC_ROOT:
                self.root.copy_rows(self.next, self.index)
        if mode & _RESET:
            self.reset(self.next if mode & _RESET_INTO_NEXT else self.root, seed)
        elif mode & _SYNC_ROOT and not mode & _STEP:
            self.root.copy_rows(self.next, self.index)

    def step(self) -> bool:
        from tensordict import TensorDict

        i = self.index
        for narrow, wide, is_wide in self.wide_actions:
            if is_wide[i]:
                narrow[i] = wide[i]
        action = TensorDict({key: self.td.get(key).clone() for key in self.action_keys})
        next_td = self.env.step(action).get("next")
        self._write(self.td.get("next"), next_td, with_reward=True)
        return bool(next_td.get("done").item())

    def reset(self, slot: Slot, seed: int | None) -> None:
        if seed is not None:
            self.env.set_seed(seed)
        out = self.env.reset()
        target = self.td.get("next") if slot is self.next else self.td
        self._write(target, out, with_reward=False)
        if slot.reward is not None:
            slot.reward[self.index] = 0.0
        slot.terminated[self.index] = slot.truncated[self.index] = slot.done[self.index] = False

    def _write(self, target: Any, source: Any, with_reward: bool) -> None:
        for key in target.keys(include_nested=True, leaves_only=True):
            if key == "reward" and not with_reward:
                continue
            key_tuple = key if isinstance(key, tuple) else (key,)
            if key_tuple[0] == "action" or key_tuple[0] == "next":
                continue
            if key in source.keys(include_nested=True):
                target.get(key).copy_(source.get(key).reshape(target.get(key).shape))


class BatchStep:
    """Runs a command on a group of gymnasium sub-envs with array observations and actions.

    Same results as each GymDriver carrying out its mode byte in turn, but the steps go in one
    pass and their results land with one vectorised write per field (a few numpy item writes
    per sub-env otherwise cost more than a cheap env's own step); copies of "next" to the root
    are vectorised too. Two commands take the fastest path: every sub-env steps, or (NEXT_STEP
    autoreset) some step and the others reset into "next", their reset counting as a
    transition with reward 0 and flags False. Other resets go through the drivers.
    """

    def __init__(self, drivers: list[GymDriver], buffers: Buffers, start: int, stop: int):
        self.drivers = drivers
        self.start = start
        self.steps = [driver.gym.step for driver in drivers]
        self.resets = [driver.gym.reset for driver in drivers]
        rows = slice(start, stop)
        action_key = drivers[0].action_leaves[0].key
        self.narrow_actions = buffers.action[action_key][rows]
        wide = buffers.wide_action.get(action_key)
        # float64 actions (see Buffers.write_action): their rows, and this group's first flag
        self.wide_actions = None if wide is None else (wide[0][rows], wide[1][start : start + 1])
        self.root, self.next = buffers.root, buffers.next
        self.obs = drivers[0].next_obs[0][rows]
        slot = buffers.next
        self.reward, self.done = slot.reward[rows], slot.done[rows]
        self.terminated, self.truncated = slot.terminated[rows], slot.truncated[rows]
        self.with_fields = bool(buffers.layout.info_fields)
        self.all_step = bytes([_STEP]) * (stop - start)  # the mode bytes of a plain step
        self.step_or_next_reset = bytes([_STEP, _RESET | _RESET_INTO_NEXT])
        self.done_rows: list[int] = []
        # Observations of one or more dims land with one np.concatenate into the rows seen as
        # [n * d0, d1, ...]: a C loop, quicker than assigning the tuple or np.stack (whose
        # Python-level expand_dims per array costs more than a big copy).
        self.obs_shape = self.obs.shape[1:]
        self.obs_shapes = {self.obs_shape}
        self.concat_out = self.obs.reshape(-1, *self.obs_shape[1:]) if self.obs_shape else None
        # (obs, concat_out) of this group's rows in each observation lane, lane 0 first
        self.lanes = [(self.obs, self.concat_out)]
        # The observations the sub-envs returned last, as they returned them: what lane 0 is
        # given back after commands into other lanes, whose arrays callers may have changed.
        self.last_obs: list[Any] = [None] * (stop - start)
        for lane in buffers.obs_lanes[1:]:
            obs = lane[rows]
            self.lanes.append(
                (obs, obs.reshape(-1, *self.obs_shape[1:]) if self.obs_shape else None)
            )

    def use_lane(self, lane: int) -> None:
        """Write the observations of "next" into observation lane ``lane`` from now on; back
        to lane 0, first write it the observations of the last command."""
        if lane == 0:
            obs = self.lanes[0][0]
            for k, value in enumerate(self.last_obs):
                obs[k] = value
        self.obs, self.concat_out = self.lanes[lane]

    def run(self, modes: bytes, seeds: np.ndarray, options: dict | None) -> dict[int, dict]:
        n = len(modes)
        actions = self.narrow_actions
        if self.wide_actions is not None and self.wide_actions[1][0]:
            actions = self.wide_actions[0]
        if modes == self.all_step:  # the hottest case: nothing but steps
            results = [step(action) for step, action in zip(self.steps, actions)]
            return self._take_extras() if self._write(results, range(n)) else {}
        if not modes.translate(None, self.step_or_next_reset):  # only those two modes
            steps, reset = self.steps, self._reset_as_step
            results = [
                steps[k](actions[k]) if mode == _STEP else reset(k, options)
                for k, mode in enumerate(modes)
            ]
            self._write(results, range(n))
            return self._take_extras()
        uniform = modes[0] if modes.count(modes[0]) == n else None
        if uniform is None:
            stepping: Sequence[int] = [k for k, mode in enumerate(modes) if mode & _STEP]
        else:
            stepping = range(n) if uniform & _STEP else ()
        self.done_rows = []
        if stepping:
            steps = self.steps
            self._write([steps[k](actions[k]) for k in stepping], stepping)
        rows = slice(self.start, self.start + n)
        # Every row's root follows "next" but those an autoreset overwrites just below
        # (SAME_STEP's step): one copy of the whole range costs less than an indexed one.
        synced = uniform is not None and uniform & _SYNC_ROOT and not uniform & _RESET
        if synced:
            self.root.copy_rows(self.next, rows)
        root_written = [False] * n
        for k in self.done_rows:
            if modes[k] & _AUTORESET:
                if modes[k] & _KEEP_FINAL_OBS:
                    self.drivers[k].extras["final_obs"] = self.last_obs[k]
                self.drivers[k].reset(self.root, None, None)
                root_written[k] = True
        if uniform is None or uniform & _RESET:
            for k, mode in enumerate(modes):
                if mode & _RESET:
                    into_next = mode & _RESET_INTO_NEXT
                    seed = int(seeds[k]) if mode & _SEED else None
                    self.drivers[k].reset(self.next if into_next else self.root, seed, options)
                    root_written[k] = not into_next
                    if into_next:
                        self.last_obs[k] = self.drivers[k].next_value
        if not synced and (uniform is None or uniform & _SYNC_ROOT):
            sync = [k for k, mode in enumerate(modes) if mode & _SYNC_ROOT and not root_written[k]]
            if len(sync) == n:
                self.root.copy_rows(self.next, rows)
            elif sync:
                self.root.copy_rows(self.next, [self.start + k for k in sync])
        return self._take_extras()

    def _reset_as_step(self, k: int, options: dict | None) -> tuple:
        """Reset sub-env ``k``; its result as the transition that NEXT_STEP reports."""
        obs, info = self.resets[k](options=options)
        return obs, 0.0, False, False, info

    def _shaped(self, observations: tuple) -> bool:
        """Whether every observation is an array of the sub-envs' observation shape."""
        try:
            return set(map(_shape_of, observations)) == self.obs_shapes
        except AttributeError:  # a list, say
            return False

    def _take_extras(self) -> dict[int, dict]:
        return take_extras(self.drivers)

    def _observation_error(self, observations: tuple, stepping: Sequence[int]) -> ValueError:
        for k, obs in zip(stepping, observations):
            try:
                fits = np.shape(obs) == self.obs_shape
            except ValueError:  # ragged
                fits = False
            if not fits or np.asarray(obs).dtype.kind not in "biuf":
                return self.drivers[k].observation_error(obs)
        return self.drivers[stepping[0]].observation_error(observations[0])

    def _write(self, results: list[tuple], stepping: Sequence[int]) -> bool:
        """Write the transitions of the sub-envs at ``stepping`` (a range of all of them, or
        a list); their finished ones go to ``self.done_rows``.

        Returns whether some sub-env left info extras behind.
        """
        everyone = len(stepping) == len(self.steps)
        rows: Any = slice(None) if everyone else list(stepping)
        observations, rewards, terminations, truncations, infos = zip(*results)
        if everyone:
            self.last_obs = list(observations)
        else:
            for k, value in zip(stepping, observations):
                self.last_obs[k] = value
        if everyone and self.concat_out is not None and self._shaped(observations):
            np.concatenate(observations, out=self.concat_out, casting="unsafe")
        else:  # lists, say, or a shape that is off (no broadcasting, as in SyncVectorEnv)
            try:
                if not all(np.shape(obs) == self.obs_shape for obs in observations):
                    raise ValueError
                self.obs[rows] = observations
            except (ValueError, TypeError) as exc:
                raise self._observation_error(observations, stepping) from exc
        try:
            self.reward[rows] = rewards
            self.terminated[rows] = terminations
            self.truncated[rows] = truncations
        except (ValueError, TypeError) as exc:
            indices = [self.drivers[k].index for k in stepping]
            raise transition_error(indices, rewards, terminations, truncations) from exc
        done = self.done
        if everyone:
            np.logical_or(self.terminated, self.truncated, out=done)
        else:
            done[rows] = self.terminated[rows] | self.truncated[rows]
        self.done_rows = [k for k in stepping if done[k]] if any_set(done) else []
        extras = False
        if self.with_fields or any(infos):
            for k, info in zip(stepping, infos):
                driver = self.drivers[k]
                driver._write_info(driver.next, "next", info)
                extras = extras or bool(driver.extras)
        return extras


_shape_of = operator.attrgetter("shape")


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


def take_extras(drivers: Sequence[Any]) -> dict[int, dict]:
    """The extras the drivers collected in a command, by sub-env index; clears them."""
    extras = {}
    for driver in drivers:
        if driver.extras:
            extras[driver.index] = driver.extras
            driver.extras = {}
    return extras


def make_driver(env: Any, index: int, buffers: Buffers):
    gym_env = gym_env_of(env)
    if gym_env is not None:
        return GymDriver(gym_env, index, buffers)
    return TensorDictDriver(env, index, buffers)


class SubEnvGroup:
    """The sub-envs one process steps: rows ``[start, start + len(env_fns))`` of the buffers.

    Besides running commands it answers the slow-path requests (attribute access, method calls,
    state dicts) that ``SerialEnv`` makes directly and ``ParallelEnv`` sends to its workers.
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], Any]], start: int, buffers: Buffers, control: Control
    ):
        self.start = start
        self.stop = start + len(env_fns)
        self.modes = control.mode[start : self.stop]  # this group's rows, sliced once
        self.seeds = control.seed[start : self.stop]
        self.lane_word = control.lane
        self.obs_lanes = buffers.obs_lanes
        self.action_objects = buffers.action_objects
        self.lane = 0  # where "next"'s observations go now
        self.envs: list[Any] = []
        try:
            built: dict[int, int] = {}  # id of each env -> its sub-env index
            for j, fn in enumerate(env_fns):
                env = check_sub_env(fn())
                if id(env) in built:  # e.g. `lambda: env`: the sub-envs would share one state
                    raise ValueError(
                        f"create_env_fn returned the same env object for sub-envs "
                        f"{built[id(env)]} and {start + j}: each sub-env needs its own instance"
                    )
                built[id(env)] = start + j
                self.envs.append(env)
            self.drivers = [make_driver(env, start + j, buffers) for j, env in enumerate(self.envs)]
        except BaseException:
            self.close()
            raise
        self.batch_step = None
        drivers = self.drivers
        layout = buffers.layout
        has_objects = bool(layout.object_obs_keys or layout.object_action_keys)
        # Object observations of a worker process go back to the parent with each answer.
        self.shipped_objects = None
        if buffers.ship_objects and layout.object_obs_keys:
            keys = layout.object_obs_keys
            self.shipped_objects = (
                [buffers.root.objects[key] for key in keys],
                [buffers.next.objects[key] for key in keys],
            )
        plain = (
            not has_objects
            and all(isinstance(d, GymDriver) and d.plain_obs for d in drivers)
            and all(d.next_obs[0] is drivers[0].next_obs[0] for d in drivers)
        )
        if drivers and plain and not drivers[0].action_leaves[0].path:
            self.batch_step = BatchStep(drivers, buffers, start, self.stop)

    def describe(self) -> list[dict]:
        return [describe_sub_env(env) for env in self.envs]

    def run(self, options: dict | None) -> dict[int, dict]:
        """Carry out the mode bytes of this group's rows; returns the extras by sub-env index."""
        modes = self.modes.tobytes()  # bytes index as ints
        seeds = self.seeds
        if self.obs_lanes and self.lane != self.lane_word[0]:
            self._use_lane(int(self.lane_word[0]))
        if self.batch_step is not None:
            return self.batch_step.run(modes, seeds, options)
        for k, (driver, mode) in enumerate(zip(self.drivers, modes)):
            if mode:
                driver.run(mode, int(seeds[k]) if mode & _SEED else None, options)
        if self.lane:  # these drivers write lane 0: hand their rows over
            rows = slice(self.start, self.stop)
            self.obs_lanes[self.lane][rows] = self.obs_lanes[0][rows]
        extras = take_extras(self.drivers)
        if self.shipped_objects is not None:
            root, next_ = self.shipped_objects
            for k, mode in enumerate(modes):
                if mode:
                    i = self.start + k
                    row = ([objects[i] for objects in root], [objects[i] for objects in next_])
                    extras.setdefault(i, {})["objects"] = row
        return extras

    def set_action_objects(self, values: dict[tuple, list]) -> None:
        """Store the object actions of this group's rows (``values[key]``: one per row)."""
        for key, objects in values.items():
            self.action_objects[key][self.start : self.stop] = objects

    def _use_lane(self, lane: int) -> None:
        self.lane = lane
        if self.batch_step is not None:
            self.batch_step.use_lane(lane)
            for driver in self.drivers:  # their resets into "next" (the general path)
                driver.next_obs = [self.obs_lanes[lane]]

    # ---- slow-path requests: each takes global sub-env indices and returns a list ------------
    def _targets(self, indices: Sequence[int], gym_level: bool) -> list[Any]:
        envs = [self.envs[i - self.start] for i in indices]
        if gym_level:
            return [gym_env_of(env) or env for env in envs]
        return envs

    def get_attr(self, indices: Sequence[int], name: str, gym_level: bool = False) -> list:
        return [_get(target, name) for target in self._targets(indices, gym_level)]

    def is_callable(self, indices: Sequence[int], name: str, gym_level: bool = False) -> list:
        return [callable(_get(target, name)) for target in self._targets(indices, gym_level)]

    def call(
        self, indices: Sequence[int], name: str, args: tuple, kwargs: dict, gym_level=False
    ) -> list:
        results = []
        for target in self._targets(indices, gym_level):
            value = _get(target, name)
            results.append(value(*args, **kwargs) if callable(value) else value)
        return results

    def set_attr(
        self, indices: Sequence[int], name: str, gym_level: bool, values: Sequence
    ) -> list:
        # ``values`` (one per index) comes last: requests append per-index values to the args.
        for target, value in zip(self._targets(indices, gym_level), values):
            if hasattr(target, "set_wrapper_attr"):
                target.set_wrapper_attr(name, value)
            else:
                setattr(target, name, value)
        return [None] * len(indices)

    def apply(self, indices: Sequence[int], fn: Callable, args: tuple, kwargs: dict) -> list:
        return [fn(target, *args, **kwargs) for target in self._targets(indices, True)]

    def state_dict(self, indices: Sequence[int]) -> list:
        return [env_state(env) for env in self._targets(indices, False)]

    def load_state_dict(self, indices: Sequence[int], states: Sequence) -> list:
        for env, state in zip(self._targets(indices, False), states):
            load_env_state(env, state)
        return [None] * len(indices)

    def close(self) -> None:
        envs, self.envs = self.envs, []
        close_each(envs)


def close_each(items: Sequence[Any]) -> None:
    """Close every item, even after one of them raised; then raise the first error."""
    error = None
    for item in items:
        try:
            item.close()
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error


def _get(target: Any, name: str) -> Any:
    if hasattr(target, "get_wrapper_attr"):
        return target.get_wrapper_attr(name)
    return getattr(target, name)


def env_state(env: Any) -> dict:
    """What restores a sub-env's randomness: its gymnasium RNG state, or its own state_dict."""
    gym_env = gym_env_of(env)
    if gym_env is not None:
        return {"np_random": gym_env.unwrapped.np_random.bit_generator.state}
    state_dict = getattr(env, "state_dict", None)
    return state_dict() if callable(state_dict) else {}


def load_env_state(env: Any, state: dict) -> None:
    gym_env = gym_env_of(env)
    if gym_env is not None:
        gym_env.unwrapped.np_random.bit_generator.state = state["np_random"]
        return
    load = getattr(env, "load_state_dict", None)
    if callable(load):
        load(state)


# Requests a worker accepts, by name (the parent sends the name and the arguments).
REQUESTS = {
    "get_attr": SubEnvGroup.get_attr,
    "is_callable": SubEnvGroup.is_callable,
    "call": SubEnvGroup.call,
    "set_attr": SubEnvGroup.set_attr,
    "apply": SubEnvGroup.apply,
    "state_dict": SubEnvGroup.state_dict,
    "load_state_dict": SubEnvGroup.load_state_dict,
}
