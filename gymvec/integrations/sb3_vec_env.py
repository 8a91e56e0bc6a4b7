"""Stable-Baselines3 ``VecEnv`` over a gymnasium ``VectorEnv`` that autoresets in the same step.

SB3's vector API expects the sub-envs to reset inside ``step``: the returned observation is
already the reset one, and the episode's last observation travels in
``info["terminal_observation"]``. That is gymnasium's ``AutoresetMode.SAME_STEP``, so this
adapter only translates formats: batched info dicts become one dict per env, ``final_obs`` /
``final_info`` become SB3's keys, and the reset info of a finished env goes to ``reset_infos``.

Per-env access (``env_method``, ``get_attr``, ``set_attr``, ``env_is_wrapped``, ``get_images``)
uses, in order of preference: ``vector_env.unwrapped.apply(fn, *args, indices=...)`` (runs a
function where each sub-env lives), the ``vector_env.unwrapped.envs`` list (``SyncVectorEnv``),
or the vector env's ``call`` / ``get_attr`` / ``set_attr`` on all sub-envs.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from gymvec.common.vector_reset import reset_vector_env
from gymvec.integrations import sub_env_ops

__all__ = ["SB3VecEnv", "to_sb3"]

# Keys of a same-step vector info that describe the finished episode, not the current one.
_FINAL_KEYS = frozenset({"final_obs", "final_info"})


_call_method, _get_attr = sub_env_ops.call_method, sub_env_ops.get_attr
_set_attr, _is_wrapped = sub_env_ops.set_attr, sub_env_ops.is_wrapped


class _FunctionAccess:
    """Per-env access for vector envs that can run a function on chosen sub-envs."""

    def __init__(self, run: Callable[[Callable, tuple, list[int]], list]) -> None:
        self._run = run

    def call(self, name: str, args: tuple, kwargs: dict, indices: list[int]) -> list:
        return self._run(_call_method, (name, args, kwargs), indices)

    def get(self, name: str, indices: list[int]) -> list:
        try:
            return self._run(_get_attr, (name,), indices)
        except NotImplementedError as error:
            # A batched env without sub-envs to reach (a torchrl env behind the face): to SB3
            # (VecEnv.__init__, has_attr) the attribute is missing.
            raise AttributeError(f"get_attr({name!r}): {error}") from error

    def set(self, name: str, value: Any, indices: list[int]) -> None:
        self._run(_set_attr, (name, value), indices)

    def is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: list[int]) -> list[bool]:
        return self._run(_is_wrapped, (wrapper_class,), indices)


def _apply_runner(apply: Callable) -> Callable[[Callable, tuple, list[int]], list]:
    def run(fn: Callable, args: tuple, indices: list[int]) -> list:
        return list(apply(fn, *args, indices=indices))

    return run


def _env_list_runner(envs: Sequence[gym.Env]) -> Callable[[Callable, tuple, list[int]], list]:
    def run(fn: Callable, args: tuple, indices: list[int]) -> list:
        return [fn(envs[i], *args) for i in indices]

    return run


class _VectorCallAccess:
    """Per-env access through the vector env's own ``call``/``get_attr``/``set_attr``.

    Those reach every sub-env at once: ``env_method`` and ``get_attr`` run on all sub-envs and
    keep the selected results; ``set_attr`` on a subset and ``env_is_wrapped`` cannot be done.
    """

    def __init__(self, vector_env: VectorEnv) -> None:
        self._vector_env = vector_env
        self._num_envs = vector_env.num_envs

    def _method(self, name: str) -> Callable:
        method = getattr(self._vector_env, name, None)
        if not callable(method):
            # AttributeError: VecEnv.__init__ and has_attr treat it as "attribute missing".
            raise AttributeError(
                f"{type(self._vector_env).__name__} gives no access to its sub-envs: it has no "
                f"'apply', 'envs' or '{name}'"
            )
        return method

    def call(self, name: str, args: tuple, kwargs: dict, indices: list[int]) -> list:
        results = self._method("call")(name, *args, **kwargs)
        return [results[i] for i in indices]

    def get(self, name: str, indices: list[int]) -> list:
        results = self._method("get_attr")(name)
        return [results[i] for i in indices]

    def set(self, name: str, value: Any, indices: list[int]) -> None:
        if sorted(indices) != list(range(self._num_envs)):
            raise NotImplementedError(
                f"set_attr({name!r}) on sub-envs {indices}: {type(self._vector_env).__name__} can "
                "only set an attribute on all its sub-envs (it has neither 'apply' nor 'envs')"
            )
        # One value per env: a list or tuple value must not be spread over the sub-envs.
        self._method("set_attr")(name, [value] * self._num_envs)

    def is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: list[int]) -> list[bool]:
        raise NotImplementedError(
            f"env_is_wrapped: {type(self._vector_env).__name__} does not expose its sub-envs' "
            "wrappers (it has neither 'apply' nor 'envs')"
        )


def _sub_env_access(vector_env: VectorEnv) -> _FunctionAccess | _VectorCallAccess:
    unwrapped = vector_env.unwrapped
    apply = getattr(unwrapped, "apply", None)
    if callable(apply):
        return _FunctionAccess(_apply_runner(apply))
    envs = getattr(unwrapped, "envs", None)
    if isinstance(envs, (list, tuple)) and len(envs) == vector_env.num_envs:
        return _FunctionAccess(_env_list_runner(envs))
    return _VectorCallAccess(unwrapped)


def _as_same_step_vector_env(env: Any) -> VectorEnv:
    if isinstance(env, (list, tuple)):
        # SB3's idiom, vec_env_cls(env_fns): that constructor is on the two classes below.
        raise TypeError(
            f"SB3VecEnv wraps one vector env; got a {type(env).__name__} of {len(env)} items. "
            "For env functions (make_vec_env's vec_env_cls, rl-zoo3), use "
            "gymvec.sb3.ParallelVecEnv(env_fns, start_method=None, **options) (like "
            "SubprocVecEnv) or gymvec.sb3.SerialVecEnv(env_fns) (like DummyVecEnv)."
        )
    if not isinstance(env, VectorEnv) and callable(getattr(env, "to_gymnasium", None)):
        env = env.to_gymnasium(autoreset_mode="same_step")
    if not isinstance(env, VectorEnv):
        raise TypeError(
            "SB3VecEnv needs a gymnasium.vector.VectorEnv or a batched env with to_gymnasium(); "
            f"got {type(env).__name__}. For a single gymnasium.Env use SB3's DummyVecEnv."
        )
    mode = env.metadata.get("autoreset_mode")
    if mode != AutoresetMode.SAME_STEP:
        raise ValueError(
            "SB3VecEnv needs a vector env that resets finished sub-envs within the same step: "
            f"metadata['autoreset_mode'] must be AutoresetMode.SAME_STEP, got {mode!r}. Build it "
            "with autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (e.g. "
            "SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)), or pass gymvec's "
            "batched env itself, which is converted with to_gymnasium(autoreset_mode='same_step')."
        )
    return env


def _unpack_infos(vector_info: Mapping, n: int, skip: frozenset = frozenset()) -> list[dict]:
    """The info of each of the ``n`` sub-envs from gymnasium's layout (arrays with ``_key``
    masks), leaving out the keys in ``skip``."""
    infos: list[dict] = [{} for _ in range(n)]
    for key, value in vector_info.items():
        if key in skip or _is_mask_key(vector_info, key):
            continue
        mask = vector_info.get(f"_{key}")
        indices = range(n) if mask is None else np.flatnonzero(mask).tolist()
        if isinstance(value, Mapping):
            nested = _unpack_infos(value, n)
            for i in indices:
                infos[i][key] = nested[i]
        else:
            for i in indices:
                infos[i][key] = value[i]
    return infos


def _option_groups(per_env: list[dict]) -> list[tuple[dict | None, list[int]]]:
    """The distinct options dicts of ``per_env`` (as copies: gymnasium's vector envs pop
    "reset_mask" out of the dict they are given; None for empty), each with its sub-envs."""
    groups: list[tuple[dict, list[int]]] = []
    for i, options in enumerate(per_env):
        options = options or {}
        for known, indices in groups:
            if known == options:
                indices.append(i)
                break
        else:
            groups.append((options, [i]))
    return [(dict(options) if options else None, indices) for options, indices in groups]


def _is_mask_key(vector_info: Mapping, key: Any) -> bool:
    return isinstance(key, str) and key.startswith("_") and key[1:] in vector_info


def _has_entry(vector_info: Mapping, key: Any, index: int) -> bool:
    """Whether sub-env ``index`` reported ``key`` (no ``_key`` mask: every sub-env did)."""
    if key not in vector_info:
        return False
    mask = vector_info.get(f"_{key}")
    return mask is None or bool(mask[index])


def _copy_obs(space: spaces.Space, obs: Any) -> Any:
    """An owned copy of a batched observation, as SB3 wants it (Dict -> OrderedDict)."""
    if isinstance(space, spaces.Dict):
        return OrderedDict((key, _copy_obs(sub, obs[key])) for key, sub in space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return tuple(_copy_obs(sub, part) for sub, part in zip(space.spaces, obs))
    return np.array(obs)


def _as_arrays(actions: Any) -> Any:
    if isinstance(actions, Mapping):
        return {key: _as_arrays(value) for key, value in actions.items()}
    if isinstance(actions, tuple):
        return tuple(_as_arrays(part) for part in actions)
    return np.asarray(actions)


class SB3VecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` over a gymnasium ``VectorEnv`` in same-step autoreset mode.

    Args:
        env: a ``gymnasium.vector.VectorEnv`` whose ``metadata["autoreset_mode"]`` is
            ``AutoresetMode.SAME_STEP``, or a gymvec batched env (anything with
            ``to_gymnasium``), converted with ``to_gymnasium(autoreset_mode="same_step")``.

    Behaves like SB3's ``DummyVecEnv``: ``reset()`` returns observations only and fills
    ``reset_infos``; ``step`` returns float32 rewards, ``dones = terminated | truncated`` and one
    info dict per env, where a finished env's info is its last step's info plus
    ``terminal_observation`` and ``TimeLimit.truncated`` (and ``fault``, the message, where
    the vector env rebuilt a faulted sub-env: a truncation; ``restarts`` and ``faults`` are the
    vector env's). Seeds and options set with ``seed()``
    and ``set_options()`` are used at the next ``reset()``; different options per env take one
    masked reset each (gymnasium's ``reset_mask``), since a vector env resets with one dict.
    """

    def __init__(self, env: Any) -> None:
        self.vector_env = _as_same_step_vector_env(env)
        self._access = _sub_env_access(self.vector_env)
        self._actions: Any = None
        self._was_reset = False
        # VecEnv.__init__ reads render_mode through get_attr: the access above must exist first.
        super().__init__(
            self.vector_env.num_envs,
            self.vector_env.single_observation_space,
            self.vector_env.single_action_space,
        )
        self.metadata = {**self.metadata, **self.vector_env.metadata}

    def reset(self) -> VecEnvObs:
        seeds = self._next_seed()
        groups = _option_groups(self._options)
        if len(groups) == 1:  # one options dict for all: one reset
            obs, infos = reset_vector_env(self.vector_env, seeds, groups[0][0])
            self.reset_infos = _unpack_infos(infos, self.num_envs)
        else:
            # A vector env resets with one options dict: one masked reset per distinct one.
            # Each returns every sub-env's current observation; the last has them all reset.
            self.reset_infos = [{} for _ in range(self.num_envs)]
            if not self._was_reset:
                # gymnasium's SyncVectorEnv cannot batch the observations of sub-envs never
                # reset: first all without options, then again those with options (seeded
                # ones with the same seed)
                obs, infos = reset_vector_env(self.vector_env, seeds)
                self.reset_infos = _unpack_infos(infos, self.num_envs)
                groups = [(options, indices) for options, indices in groups if options]
            for options, indices in groups:
                mask = np.zeros(self.num_envs, dtype=bool)
                mask[indices] = True
                masked = {**(options or {}), "reset_mask": mask}
                obs, infos = reset_vector_env(self.vector_env, seeds, masked)
                unpacked = _unpack_infos(infos, self.num_envs)
                for i in indices:
                    self.reset_infos[i] = unpacked[i]
        self._was_reset = True
        self._reset_seeds()
        self._reset_options()
        return _copy_obs(self.observation_space, obs)

    def _next_seed(self) -> list[int | None] | None:
        if all(seed is None for seed in self._seeds):
            return None
        return list(self._seeds)

    @property
    def envs(self) -> list:
        """The sub-envs, as ``DummyVecEnv.envs``, where the vector env has them in this
        process (``SerialVectorEnv``, gymnasium's ``SyncVectorEnv``)."""
        envs = getattr(self.vector_env, "envs", None)
        if envs is None:
            raise AttributeError(
                f"{type(self.vector_env).__name__} runs its sub-envs elsewhere: no `envs` here "
                "(use env_method/get_attr/set_attr)"
            )
        return list(envs)

    @property
    def restarts(self) -> np.ndarray:
        """Restarts per sub-env of the vector env (``on_fault="restart"``; see
        ``docs/faults.md``)."""
        return cast(Any, self.vector_env.unwrapped).restarts

    @property
    def faults(self) -> list:
        """The vector env's most recent faults, oldest first (``gymvec.Fault`` records)."""
        return cast(Any, self.vector_env.unwrapped).faults

    def step_async(self, actions: Any) -> None:
        self._actions = self._batch_actions(actions)

    def _batch_actions(self, actions: Any) -> Any:
        space = self.action_space
        if not isinstance(space, (spaces.Dict, spaces.Tuple)):
            return np.asarray(actions)
        if isinstance(actions, (list, np.ndarray)):
            # SB3 style: one structured action per env, stacked into gymnasium's batched layout.
            if len(actions) != self.num_envs:
                raise ValueError(
                    f"actions: expected one action per env ({self.num_envs}), got {len(actions)}"
                )
            empty = create_empty_array(space, self.num_envs)  # a dict or a tuple here
            return concatenate(space, list(actions), cast("dict[str, Any] | tuple", empty))
        # A dict (or tuple) of batched arrays: already gymnasium's layout.
        return _as_arrays(actions)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() called without a pending step_async(actions)")
        actions, self._actions = self._actions, None
        obs, rewards, terminations, truncations, infos = self.vector_env.step(actions)
        terminations = np.asarray(terminations, dtype=bool)
        truncations = np.asarray(truncations, dtype=bool)
        dones = terminations | truncations
        step_infos = _unpack_infos(infos, self.num_envs, skip=_FINAL_KEYS)
        finished = np.flatnonzero(dones).tolist()
        if finished:
            final_infos = self._final_infos(infos, finished)
            for i in finished:  # the step info is the episode's last; the other, its reset's
                self.reset_infos[i], step_infos[i] = step_infos[i], final_infos[i]
        if "fault" in infos:  # a faulted row (on_fault="restart"): its episode's last info
            for i in np.flatnonzero(infos["_fault"]).tolist():
                step_infos[i]["fault"] = infos["fault"][i]
                self.reset_infos[i].pop("fault", None)
        time_limit = (truncations & ~terminations).tolist()
        for info, truncated in zip(step_infos, time_limit):
            info["TimeLimit.truncated"] = truncated
        rewards = np.array(rewards, dtype=np.float32)
        return _copy_obs(self.observation_space, obs), rewards, dones, step_infos

    def _final_infos(self, infos: Mapping, finished: list[int]) -> dict[int, dict]:
        """The last step's info of each finished sub-env, with ``terminal_observation``."""
        missing = [i for i in finished if not _has_entry(infos, "final_obs", i)]
        if missing:
            raise RuntimeError(
                f"sub-envs {missing} finished but the vector env's infos have no 'final_obs' for "
                "them; SB3VecEnv needs same-step autoreset infos"
            )
        unpacked = None
        if "final_info" in infos:
            unpacked = _unpack_infos(infos["final_info"], self.num_envs)
        final_infos = {}
        for i in finished:
            info = {}
            if unpacked is not None and _has_entry(infos, "final_info", i):
                info = unpacked[i]
            last = infos["final_obs"][i]
            # an array, the usual case, copies faster than deepcopy copies it
            info["terminal_observation"] = (
                last.copy() if type(last) is np.ndarray else copy.deepcopy(last)
            )
            final_infos[i] = info
        return final_infos

    def close(self) -> None:
        self.vector_env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"get_images() needs render_mode 'rgb_array', the envs have {self.render_mode!r}",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return self.env_method("render")

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        return self._access.call(method_name, method_args, method_kwargs, self._indices(indices))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._access.get(attr_name, self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._access.set(attr_name, value, self._indices(indices))

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        return self._access.is_wrapped(wrapper_class, self._indices(indices))

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        """SB3's indices (None, an int or an iterable, negatives allowed) as a list of ints."""
        selected = []
        for index in self._get_indices(indices):
            if not -self.num_envs <= index < self.num_envs:
                raise IndexError(f"env index {index} is out of range for {self.num_envs} envs")
            selected.append(int(index) % self.num_envs)
        return selected


def to_sb3(env: Any) -> SB3VecEnv:
    """``SB3VecEnv(env)``: a Stable-Baselines3 ``VecEnv`` over ``env``."""
    return SB3VecEnv(env)
