"""A gymnasium ``VectorEnv`` as a batched, explicit-reset :class:`EnvBase`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from tensordict import TensorDict, TensorDictBase

from gymvec.common.infos import InfoField, declared_fields
from gymvec.common.reprs import never_raises
from gymvec.common.structure import Leaf, build_value, get_leaf, observation_leaves, space_leaves
from gymvec.common.vector_reset import reset_vector_env
from gymvec.envs.base import (
    DONE_KEYS,
    EnvBase,
    copy_object_rows,
    copy_shared_rows,
    make_reward_spec,
)
from gymvec.envs.gym_env import observation_spec_from_space
from gymvec.spaces import spec_from_space
from gymvec.specs import (
    DeviceLike,
    info_spec_of,
    non_tensor,
    numpy_to_torch_dtype,
    object_values,
)

PENDING_KEY = "reset_pending"


class GymVectorEnvWrapper(EnvBase):
    """Any ``gymnasium.vector.VectorEnv`` as a batched ``EnvBase`` with explicit resets.

    The batch size is ``[num_envs]``. ``step`` puts the true next observation in
    ``td["next"]`` (the terminal one when an episode ends) and never resets a sub-env;
    ``reset(td)`` with a ``"_reset"`` mask resets only the masked sub-envs. Stepping a sub-env
    that finished and was not reset raises ``RuntimeError`` (the vector env would otherwise
    reset it on its own, or has already done so).

    How each ``metadata["autoreset_mode"]`` is handled (the ``autoreset_mode`` attribute is the
    fallback; NEXT_STEP with a warning when neither exists):

    * DISABLED: a partial reset is ``reset(options={"reset_mask": mask})``.
    * SAME_STEP: the vector env resets finished sub-envs inside ``step``. The wrapper reports
      ``infos["final_obs"]``/``infos["final_info"]`` as the true next obs/info and stashes the
      reset obs/info; a later unseeded reset of those sub-envs returns the stash without calling
      the vector env. Other masked sub-envs (running ones, or all of them after ``set_seed``)
      go through ``reset_mask``.
    * NEXT_STEP, when the vector env supports ``reset_mask`` (Sync/AsyncVectorEnv, gymnasium
      >= 1.1, clear their pending autoreset for the masked sub-envs): a partial reset is a
      ``reset_mask`` reset, so the autoreset step never happens.
    * NEXT_STEP, native vector envs without ``reset_mask`` (e.g. CartPoleVectorEnv, whose
      ``reset`` resets every sub-env whatever the options): **deferred resets**. A sub-env can
      only be reset by the vector env's next ``step``, which also steps the others, so its
      reset observation cannot be known at ``reset`` time. A partial reset of finished sub-envs
      only marks them pending: their rows of the returned root keep the last (terminal)
      observation as a placeholder and ``"reset_pending"`` is True. The next ``step`` is their
      reset step: their action is ignored, and ``td["next"]`` holds the reset observation with
      reward 0 and all flags False. Rows whose root ``"reset_pending"`` is True are therefore
      not transitions: drop them and every real transition appears exactly once. Limits: a
      finished sub-env spends one extra ``step`` call on its reset; a running sub-env cannot be
      reset alone (``RuntimeError``), nor can a partial reset be seeded (``RuntimeError``);
      the reset info of a deferred reset arrives in ``last_step_info`` of that step.
      ``"reset_pending"`` (bool, ``[N, 1]``) is in every root and ``"next"`` of such a wrapper,
      and in no other.

    ``reset_mask`` support is assumed for Sync/AsyncVectorEnv (under any vector wrappers) and
    for DISABLED envs; pass ``supports_reset_mask`` to say otherwise. The first reset must
    reset every sub-env.

    Infos: entries of the vector info that are numeric arrays ``[N, ...]`` with a ``_name``
    mask at the first reset (or given with ``info_fields``: name -> one sub-env's example
    value) become ``("info", name)`` keys, zero where a sub-env did not report them. The whole
    vector info dicts stay reachable as ``last_reset_info`` and ``last_step_info``.

    Seeding: ``set_seed(s)`` makes the next reset call ``reset(seed=s)``, so sub-env ``i``
    gets ``s + i`` inside Sync/AsyncVectorEnv.

    Args:
        vector_env: the gymnasium vector env; ``close()`` closes it.
        device: where outputs live.
        supports_reset_mask: whether ``reset(options={"reset_mask": ...})`` resets only the
            masked sub-envs (None: guess, see above).
        info_fields: numeric info entries to declare up front instead of inferring them.
        reward_dtype: the dtype of ``"reward"`` (float64 keeps gymnasium's rewards unrounded).

    Example:
        >>> import gymnasium as gym
        >>> vec = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
        >>> env = GymVectorEnvWrapper(vec)
        >>> env.set_seed(0)
        >>> td = env.reset()
        >>> td, root = env.step_and_maybe_reset(env.rand_action(td))
        >>> td["next", "reward"].shape
        torch.Size([2, 1])
    """

    def __init__(
        self,
        vector_env: gym.vector.VectorEnv,
        device: DeviceLike = None,
        *,
        supports_reset_mask: bool | None = None,
        info_fields: dict[str, Any] | None = None,
        reward_dtype: torch.dtype = torch.float32,
    ) -> None:
        if not isinstance(vector_env, gym.vector.VectorEnv):
            raise TypeError(
                "GymVectorEnvWrapper expects a gymnasium.vector.VectorEnv, "
                f"got {type(vector_env)!r}"
            )
        num_envs = int(vector_env.num_envs)
        super().__init__(batch_size=(num_envs,), device=device)
        self.vector_env = vector_env
        self.num_envs = num_envs
        self.autoreset_mode = _autoreset_mode(vector_env)
        if supports_reset_mask is None:
            supports_reset_mask = self.autoreset_mode == AutoresetMode.DISABLED or isinstance(
                vector_env.unwrapped, SyncVectorEnv | AsyncVectorEnv
            )
        self.supports_reset_mask = bool(supports_reset_mask)
        self.deferred_resets = (
            self.autoreset_mode == AutoresetMode.NEXT_STEP and not self.supports_reset_mask
        )

        obs_space = vector_env.single_observation_space
        action_space = vector_env.single_action_space
        self.obs_leaves: list[Leaf] = observation_leaves(obs_space)
        self.action_leaves: list[Leaf] = space_leaves(action_space, ("action",))
        # Values of spaces without a fixed shape are NonTensorStacks (see envs.structure).
        obs_spec = observation_spec_from_space(obs_space, "single_observation_space")
        self.observation_spec = obs_spec.expand(num_envs)
        action_spec = spec_from_space(action_space, "single_action_space", objects=True)
        self.action_spec = action_spec.expand(num_envs)
        self.reward_spec = make_reward_spec(self.batch_size, reward_dtype)

        self._fields_known = info_fields is not None
        self.info_fields: dict[str, InfoField] = declared_fields(info_fields)
        self._update_info_spec()

        self.last_reset_info: dict = {}
        self.last_step_info: dict = {}
        self._pending_seed: int | Sequence[int | None] | None = None
        self._pending_options: dict | None = None
        self._root: TensorDict | None = None  # the current root of every sub-env (CPU)
        n = num_envs
        self._finished = np.zeros(n, dtype=bool)  # finished and not reset yet
        self._pending = np.zeros(n, dtype=bool)  # deferred resets (native NEXT_STEP)
        self._stashed = np.zeros(n, dtype=bool)  # SAME_STEP: reset already done by the env
        self._stash: TensorDict | None = None
        self._stash_info: dict = {}

    # ---- forwarded to the vector env ----------------------------------------------------------
    @property
    def metadata(self) -> dict:
        return self.vector_env.metadata

    @property
    def render_mode(self) -> str | None:
        return self.vector_env.render_mode

    def render(self) -> Any:
        return self.vector_env.render()

    # ---- EnvBase ------------------------------------------------------------------------------
    def _set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        self._pending_seed = seed

    def set_reset_options(self, options: dict | None) -> None:
        """Reset options (gymnasium's ``reset(options=...)``) for the vector env's next reset,
        as ``set_seed`` gives its seed; a partial reset adds its ``"reset_mask"`` to them."""
        self._pending_options = dict(options) if options else None

    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        n = self.num_envs
        mask = np.ones(n, dtype=bool)
        if td is not None and "_reset" in td.keys():
            mask = td.get("_reset").reshape(n).cpu().numpy().astype(bool)
        if self._root is None and not mask.all():
            raise RuntimeError(
                "the first reset of GymVectorEnvWrapper must reset every sub-env "
                f'(got "_reset" {mask.tolist()})'
            )
        if not mask.any() and self._root is not None:
            return self._output(self._root)
        seed = self._pending_seed
        from_stash = mask & self._stashed if seed is None else np.zeros(n, dtype=bool)
        real = mask & ~from_stash
        defer = False
        if real.any() and not real.all() and not self.supports_reset_mask:
            defer = self._check_deferrable(real, seed)

        obs, info = None, None  # both set when the vector env resets
        options, self._pending_options = self._pending_options, None
        if real.all():
            obs, info = reset_vector_env(self.vector_env, seed, options)
        elif real.any() and not defer:
            # a fresh options dict each call: gymnasium pops "reset_mask" out of it
            options = {**(options or {}), "reset_mask": real.copy()}
            obs, info = reset_vector_env(self.vector_env, seed, options)
        self._pending_seed = None
        if info is not None and not self._fields_known:
            self.info_fields = _infer_info_fields(info, n)
            self._fields_known = True
            self._update_info_spec()

        if self._root is None:
            self._root = self._empty_root()
        root = self._root
        if info is not None:
            fresh = self._observation_td(obs, info)
            self._set_rows(root, fresh, real)
        if from_stash.any():
            stash = cast(TensorDict, self._stash)  # rows are stashed once a stash exists
            self._set_rows(root, stash, from_stash)
        if defer:
            self._pending |= real
        elif real.all():
            self._pending[:] = False
        else:
            self._pending &= ~real
        for key in DONE_KEYS:
            root.get(key)[torch.from_numpy(mask)] = False
        if self.deferred_resets:
            root.set(PENDING_KEY, torch.from_numpy(self._pending.copy()).unsqueeze(-1))
        self._finished &= ~mask
        self._stashed &= ~mask
        self.last_reset_info = self._reset_info(info, real, from_stash)
        return self._output(root)

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        if self._root is None:
            raise RuntimeError("GymVectorEnvWrapper: call reset() before step()")
        if self._finished.any():
            raise RuntimeError(
                f"sub-envs {np.flatnonzero(self._finished).tolist()} finished and were not reset: "
                'reset them (a "_reset" mask) before stepping'
            )
        return self._vector_step(td)

    def can_autoreset_step(self, resetting: np.ndarray) -> bool:
        """Whether ``autoreset_step`` resets exactly the sub-envs of ``resetting``."""
        return self.autoreset_mode == AutoresetMode.NEXT_STEP and np.array_equal(
            self._finished, resetting
        )

    def autoreset_step(self, td: TensorDictBase) -> TensorDictBase:
        """One step of a NEXT_STEP vector env in its own semantics: the sub-envs that finished
        last step are reset by it (their actions ignored; in ``td["next"]``: the reset
        observation, reward 0, flags False) while the others step. This is gymnasium's
        NEXT_STEP step, which the gymnasium face asks for over this wrapper."""
        self._check_open()
        if self.autoreset_mode != AutoresetMode.NEXT_STEP:
            raise NotImplementedError(
                f"autoreset_step needs a NEXT_STEP vector env, this one is {self.autoreset_mode}"
            )
        if self._root is None:
            raise RuntimeError("GymVectorEnvWrapper: call reset() before step()")
        self._check_action(td)
        td.set("next", self._vector_step(td))
        return td

    def _vector_step(self, td: TensorDictBase) -> TensorDictBase:
        obs, reward, terminated, truncated, info = self.vector_env.step(self._gym_action(td))
        self.last_step_info = info
        terminated = np.asarray(terminated, dtype=bool).reshape(self.num_envs)
        truncated = np.asarray(truncated, dtype=bool).reshape(self.num_envs)
        done = terminated | truncated
        out = self._observation_td(obs, info)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            self._stash = out.clone()
            self._stash_info = info
            self._stashed = done.copy()
            self._put_final(out, info, done)
        reward = np.asarray(reward).reshape(self.num_envs, 1)
        out.set("reward", torch.as_tensor(reward).to(self.reward_spec.dtype))
        out.set("terminated", torch.from_numpy(terminated).unsqueeze(-1))
        out.set("truncated", torch.from_numpy(truncated).unsqueeze(-1))
        out.set("done", torch.from_numpy(done).unsqueeze(-1))
        # the vector env has carried out every deferred reset in this step
        self._pending[:] = False
        if self.deferred_resets:
            out.set(PENDING_KEY, torch.zeros(self.num_envs, 1, dtype=torch.bool))
        self._finished = done
        self._root = out.exclude("reward")
        return self._output(out)

    def _close(self) -> None:
        self.vector_env.close()

    # ---- helpers ------------------------------------------------------------------------------
    def _check_deferrable(self, real: np.ndarray, seed: Any) -> bool:
        """Whether the partial reset ``real`` can wait for the next step; raises if it cannot."""
        rows = np.flatnonzero(real).tolist()
        if not self.deferred_resets:
            raise RuntimeError(
                f"{type(self.vector_env).__name__} cannot reset sub-envs {rows} alone (no "
                "reset_mask support); reset every sub-env, or pass supports_reset_mask=True if "
                "it does support it"
            )
        running = np.flatnonzero(real & ~self._finished & ~self._pending).tolist()
        if running:
            raise RuntimeError(
                f"sub-envs {running} of {type(self.vector_env).__name__} (NEXT_STEP, no "
                "reset_mask support) are running: only finished sub-envs can be reset alone; "
                "reset every sub-env instead"
            )
        if seed is not None:
            raise RuntimeError(
                f"{type(self.vector_env).__name__} (NEXT_STEP, no reset_mask support) cannot "
                f"seed a partial reset of sub-envs {rows}: seed a reset of every sub-env"
            )
        return True

    def _set_rows(self, dest: TensorDict, source: TensorDictBase, rows: np.ndarray) -> None:
        """Copy the entries of ``source`` that ``dest`` has into ``dest``, for ``rows`` only
        (object observations too, which tensordict does not list among the leaves)."""
        copy_shared_rows(dest, source, rows)
        for leaf in self.obs_leaves:
            if leaf.is_object:
                copy_object_rows(dest, source, leaf.key, rows)

    def _gym_action(self, td: TensorDictBase) -> Any:
        arrays = [
            tuple(object_values(td.get(leaf.key)))  # batched as gymnasium does: a tuple
            if leaf.is_object
            else td.get(leaf.key).detach().cpu().numpy()
            for leaf in self.action_leaves
        ]
        return build_value(self.vector_env.single_action_space, self.action_leaves, arrays)

    def _observation_td(self, obs: Any, info: dict) -> TensorDict:
        """Observations and declared info fields of every sub-env, from batched values."""
        out = TensorDict(
            {
                leaf.key: torch.as_tensor(np.asarray(get_leaf(obs, leaf.path), dtype=leaf.dtype))
                for leaf in self.obs_leaves
                if not leaf.is_object
            },
            batch_size=self.batch_size,
        )
        for leaf in self.obs_leaves:
            if leaf.is_object:  # a tuple of the sub-envs' objects
                out.set(leaf.key, non_tensor(get_leaf(obs, leaf.path), self.batch_size))
        for name, value in self._info_values(info).items():
            out.set(("info", name), value)
        return out

    def _info_values(self, info: dict) -> dict[str, torch.Tensor]:
        values = {}
        for name, field in self.info_fields.items():
            array = np.zeros((self.num_envs, *field.shape), dtype=field.dtype)
            value = info.get(name)
            if isinstance(value, np.ndarray) and value.shape == array.shape:
                present = np.asarray(info.get(f"_{name}", np.ones(self.num_envs, dtype=bool)))
                array[present] = value[present]
            values[name] = torch.from_numpy(array)
        return values

    def _put_final(self, out: TensorDict, info: dict, done: np.ndarray) -> None:
        """SAME_STEP: the true last obs/info of the finished sub-envs, into ``out``."""
        final_obs = info.get("final_obs")
        if final_obs is None:
            raise RuntimeError(
                f"{type(self.vector_env).__name__} (SAME_STEP) finished sub-envs "
                f"{np.flatnonzero(done).tolist()} without infos['final_obs']"
            )
        for leaf in self.obs_leaves:
            if leaf.is_object:
                values = object_values(out.get(leaf.key))
                for i in np.flatnonzero(done):
                    values[i] = get_leaf(final_obs[i], leaf.path)
                out.set(leaf.key, non_tensor(values, self.batch_size))
                continue
            for i in np.flatnonzero(done):
                row = np.asarray(get_leaf(final_obs[i], leaf.path), dtype=leaf.dtype)
                out.get(leaf.key)[i] = torch.from_numpy(row)
        if self.info_fields:
            final = self._info_values(info.get("final_info", {}))
            rows = torch.from_numpy(done)
            for name, value in final.items():
                out.get(("info", name))[rows] = value[rows]

    def _reset_info(self, info: dict | None, real: np.ndarray, from_stash: np.ndarray) -> dict:
        if not from_stash.any():
            return info if info is not None else {}
        stashed = _select_rows(self._stash_info, from_stash, skip=("final_obs", "final_info"))
        if not info:
            return stashed
        return _merge_infos(_select_rows(info, real), stashed)

    def _empty_root(self) -> TensorDict:
        root = self.observation_spec.zero()
        for key in DONE_KEYS:
            root.set(key, torch.zeros(self.num_envs, 1, dtype=torch.bool))
        for name, field in self.info_fields.items():
            shape = (self.num_envs, *field.shape)
            root.set(("info", name), torch.zeros(shape, dtype=numpy_to_torch_dtype(field.dtype)))
        return root

    def _update_info_spec(self) -> None:
        self.info_spec = info_spec_of(self.info_fields).expand(self.num_envs)

    def _output(self, source: TensorDict) -> TensorDictBase:
        return source.to(self.device) if self.device.type != "cpu" else source.clone()

    @never_raises
    def __repr__(self) -> str:
        return (
            f"GymVectorEnvWrapper({type(self.vector_env).__name__}, num_envs={self.num_envs}, "
            f"autoreset_mode={self.autoreset_mode.name}, device={self.device})"
        )


def _autoreset_mode(vector_env: gym.vector.VectorEnv) -> AutoresetMode:
    mode = (vector_env.metadata or {}).get("autoreset_mode")
    if mode is None:
        mode = getattr(vector_env, "autoreset_mode", None)
    if mode is None:
        warnings.warn(
            f"{type(vector_env).__name__} declares no metadata['autoreset_mode']: "
            "assuming AutoresetMode.NEXT_STEP",
            stacklevel=3,
        )
        return AutoresetMode.NEXT_STEP
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(
            f"metadata['autoreset_mode']: expected a gymnasium AutoresetMode, got {mode!r}"
        ) from None


def _infer_info_fields(info: dict, num_envs: int) -> dict[str, InfoField]:
    """Fields for the numeric per-env arrays of a vector info (those with a ``_name`` mask)."""
    fields = {}
    for name, value in info.items():
        if not isinstance(name, str) or name.startswith("_") or f"_{name}" not in info:
            continue
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            continue
        if value.ndim == 0 or value.shape[0] != num_envs:
            continue
        shape = tuple(value.shape[1:])
        kind = np.ndarray if shape else value.dtype.type
        fields[name] = InfoField(name, kind, shape, value.dtype)
    return fields


def _select_rows(info: dict, rows: np.ndarray, skip: tuple[str, ...] = ()) -> dict:
    """The part of a vector info that belongs to ``rows``, laid out as gymnasium would."""
    out: dict = {}
    for key, value in info.items():
        mask = info.get(f"_{key}")
        if (isinstance(key, str) and key.startswith("_")) or key in skip or mask is None:
            continue
        keep = np.asarray(mask, dtype=bool) & rows
        if not keep.any():
            continue
        if isinstance(value, dict):
            out[key] = _select_rows(value, rows)
        else:
            array = np.array(value, copy=True)
            array[~keep] = None if array.dtype == object else 0
            out[key] = array
        out[f"_{key}"] = keep
    return out


def _merge_infos(a: dict, b: dict) -> dict:
    """Two vector infos of disjoint sub-envs as one."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(key, str) and key.startswith("_"):
            continue
        if key not in out:
            out[key], out[f"_{key}"] = value, b[f"_{key}"]
            continue
        rows = b[f"_{key}"]
        merged: dict | np.ndarray
        if isinstance(value, dict) and isinstance(out[key], dict):
            merged = _merge_infos(out[key], value)
        elif (
            isinstance(value, np.ndarray)
            and isinstance(out[key], np.ndarray)
            and value.shape == out[key].shape
            and value.dtype == out[key].dtype
        ):
            merged = out[key].copy()
            merged[rows] = value[rows]
        elif isinstance(value, np.ndarray) and isinstance(out[key], np.ndarray):
            # types differ between sub-envs: one object per sub-env, as gymnasium would do
            merged = np.empty(len(rows), dtype=object)
            for i in range(len(rows)):
                merged[i] = value[i] if rows[i] else out[key][i]
        else:  # a dict for some sub-envs, a value for others: no common layout exists
            merged = value
        out[key], out[f"_{key}"] = merged, out[f"_{key}"] | rows
    return out
