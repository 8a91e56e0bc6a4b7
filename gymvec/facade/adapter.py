"""Any batched ``EnvBase`` behind the command interface the gymnasium face drives.

``SerialEnv`` and ``ParallelEnv`` implement the command interface themselves (one mode byte per
sub-env, numpy buffers, ``send``/``recv``). Other batched envs (``GymVectorEnvWrapper``, a
user's vectorised torch env) only have the tensordict API; :class:`CommandAdapter` carries the
same commands out with ``reset``/``step``/``step_and_maybe_reset`` and copies the results into
private buffers of the same layout, so the face has one code path.

A command that steps some sub-envs and resets others (NEXT_STEP autoreset) needs an env that
can do both in one step: a ``GymVectorEnvWrapper`` of a NEXT_STEP vector env can (its vector
env's own step resets the finished sub-envs); other envs are refused under NEXT_STEP (use
"same_step" or "disabled").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from gymvec.batched.base import spec_leaves
from gymvec.batched.buffers import BufferLayout, Buffers, Slot, private_memory
from gymvec.batched.driver import Mode
from gymvec.envs.base import EnvBase, copy_rows
from gymvec.envs.infos import InfoField
from gymvec.specs import non_tensor, non_tensor_values, torch_to_numpy_dtype

_STEP, _RESET, _AUTORESET = int(Mode.STEP), int(Mode.RESET), int(Mode.AUTORESET)
_SYNC_ROOT, _INTO_NEXT = int(Mode.SYNC_ROOT), int(Mode.RESET_INTO_NEXT)


class CommandAdapter:
    """Drives a batched EnvBase (batch size ``[n]``) through gymvec's command interface."""

    def __init__(self, env: EnvBase):
        if len(env.batch_size) != 1:
            raise ValueError(
                f"the gymnasium face needs an env with one batch dim, got {tuple(env.batch_size)}"
            )
        self.env = env
        self.num_envs = env.batch_size[0]
        self.device = env.device
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.observation_spec = env.observation_spec
        self.action_spec = env.action_spec
        info_spec = env.info_spec.unbatch(1)
        fields = {
            name: InfoField(name, np.ndarray, tuple(spec.shape), torch_to_numpy_dtype(spec.dtype))
            for name, spec in info_spec.items()
        }
        self.layout = BufferLayout(
            self.num_envs,
            spec_leaves(env.observation_spec.unbatch(1)),
            spec_leaves(env.full_action_spec.unbatch(1)),
            fields,
        )
        self.buffers = Buffers(self.layout, private_memory(self.layout.nbytes))
        self._views = self.buffers.tensordict()
        self._action_keys = [("action", *key[1:]) for key in self.layout.action_keys]
        self._command: tuple | None = None
        self._in_flight = False
        self._all = np.ones(self.num_envs, dtype=bool)

    def send(self, modes, seeds=None, options=None, lane: int = 0) -> None:
        if lane:  # the buffers here have no observation lanes (see BufferLayout)
            raise ValueError(f"lane: expected 0 (no observation lanes here), got {lane!r}")
        modes = np.broadcast_to(np.asarray(modes), (self.num_envs,)).copy()
        self._command = (modes, seeds, options)
        self._in_flight = True

    def recv(
        self, timeout: float | None = None, on_local_done: Callable[[int], None] | None = None
    ) -> dict[int, dict]:
        # The wrapped env carries out the whole command here: ``on_local_done`` has nothing to
        # overlap with.
        modes, seeds, options = self._command
        self._in_flight = False
        stepping = (modes & _STEP).astype(bool)
        resetting = (modes & _RESET).astype(bool)
        if stepping.any() and resetting.any() and self._autoreset_step(resetting):
            return self._extras("next", self._step_infos())
        if stepping.any() and resetting.any():
            raise NotImplementedError(
                f"{type(self.env).__name__} cannot step some sub-envs while resetting others "
                "(NEXT_STEP autoreset): use autoreset_mode='same_step' or 'disabled'"
            )
        if resetting.any():
            into_next = bool((modes & _INTO_NEXT).any())
            self._reset(resetting, seeds, options, into_next)
            infos = self._infos("last_reset_info")
            return self._extras("next" if into_next else "root", infos, resetting)
        if stepping.any():
            if not stepping.all():
                raise NotImplementedError(f"{type(self.env).__name__} cannot step a subset")
            return self._step(autoreset=bool((modes & _AUTORESET).any()))
        return {}

    # Infos: a wrapped gymnasium vector env's own (GymVectorEnvWrapper keeps the last ones),
    # per sub-env, as the extras the face lays out again as gymnasium does; the info fields
    # are in the buffers already.
    def _infos(self, name: str) -> list[dict] | None:
        info = getattr(self.env, name, None)
        if not isinstance(info, dict):
            return None
        per_env = unbatch_info(info, self.num_envs)
        if self.layout.info_fields:
            per_env = [
                {k: v for k, v in row.items() if k not in self.layout.info_fields}
                for row in per_env
            ]
        return per_env

    def _step_infos(self) -> list[dict] | None:
        """The step's infos; a SAME_STEP vector env's finished sub-envs report their last
        step's in ``final_info`` (and the reset's at the top, which a reset hands out)."""
        per_env = self._infos("last_step_info")
        info = getattr(self.env, "last_step_info", None)
        if per_env is None or "final_info" not in info:
            return per_env
        finals = unbatch_info(info["final_info"], self.num_envs)
        for i in np.flatnonzero(info.get("_final_info", ())).tolist():
            per_env[i] = {k: v for k, v in finals[i].items() if k not in self.layout.info_fields}
        return per_env

    @staticmethod
    def _extras(
        slot: str, infos: list[dict] | None, rows: np.ndarray | None = None
    ) -> dict[int, dict]:
        if infos is None:
            return {}
        return {
            i: {slot: info} for i, info in enumerate(infos) if info and (rows is None or rows[i])
        }

    def _autoreset_step(self, resetting: np.ndarray) -> bool:
        """NEXT_STEP over an env that resets finished sub-envs in its own step (a
        GymVectorEnvWrapper of a NEXT_STEP vector env): one step does the whole command."""
        can_autoreset_step = getattr(self.env, "can_autoreset_step", None)
        if can_autoreset_step is None or not can_autoreset_step(resetting):
            return False
        self._write_next(self.env.autoreset_step(self._action_td()).get("next"))
        return True

    def _reset(self, mask: np.ndarray, seeds, options: dict | None, into_next: bool) -> None:
        # Reset options reach envs that take them (GymVectorEnvWrapper); others never had any.
        set_reset_options = getattr(self.env, "set_reset_options", None)
        if set_reset_options is not None:
            set_reset_options(options)
        if seeds is not None:
            first = seeds[0]
            if mask.all() and first is not None and seeds == [first + i for i in range(len(seeds))]:
                # an int seed: vector envs with a single generator (native ones) take only that
                self.env.set_seed(first)
            else:
                self.env.set_seed([s if m else None for s, m in zip(seeds, mask)])
        td = TensorDict({"_reset": torch.from_numpy(mask.copy()).unsqueeze(-1)}, [self.num_envs])
        out = self.env.reset(td if not mask.all() else None)
        target = self._views.get("next") if into_next else self._views
        slot = self.buffers.next if into_next else self.buffers.root
        self._copy_rows(target, slot, out, mask)
        slot.info_present[mask] = True
        if into_next:
            slot.reward[mask] = 0.0

    def _step(self, autoreset: bool) -> dict[int, dict]:
        td = self._action_td()
        if not autoreset:
            td = self.env.step(td)
            self._write_next(td.get("next"))
            return self._extras("next", self._step_infos())
        td, root = self.env.step_and_maybe_reset(td)
        self._write_next(td.get("next"))
        extras = self._extras("next", self._step_infos())
        self._copy_rows(self._views, self.buffers.root, root, self._all)
        self.buffers.root.info_present[:] = True
        done = self.buffers.next.done.copy()
        if done.any():
            for i, info in self._extras("root", self._infos("last_reset_info"), done).items():
                extras.setdefault(i, {}).update(info)
            # A SAME_STEP vector env hands the finished sub-envs' last observations over as
            # they returned them.
            final_obs = getattr(self.env, "last_step_info", {}).get("final_obs")
            if final_obs is not None:
                for i in np.flatnonzero(done).tolist():
                    extras.setdefault(i, {})["final_obs"] = final_obs[i]
        return extras

    def _action_td(self) -> TensorDict:
        """The actions the face wrote into the buffers, as the env's input."""
        actions = {key: self._views.get(key).clone() for key in self._action_keys}
        td = TensorDict(actions, [self.num_envs])
        for key, values in self.buffers.action_objects.items():
            td.set(("action", *key[1:]), non_tensor(values, td.batch_size))
        return td

    def _write_next(self, next_td: TensorDict) -> None:
        self._copy_rows(self._views.get("next"), self.buffers.next, next_td, self._all)
        self.buffers.next.info_present[:] = True

    def _copy_rows(self, target: TensorDict, slot: Slot, source: TensorDict, rows) -> None:
        """Copy ``source``'s values at ``rows`` into the buffers: into ``target`` (views of
        ``slot``) the tensors they share but actions and "next", into ``slot.objects`` the
        object observations."""
        in_source = source.keys(include_nested=True)
        for key in target.keys(include_nested=True, leaves_only=True):
            key_tuple = key if isinstance(key, tuple) else (key,)
            if key_tuple[0] in ("next", "action") or key not in in_source:
                continue
            dest = target.get(key)
            copy_rows(dest, source.get(key).to(dest.dtype).reshape(dest.shape), rows)
        for key, objects in slot.objects.items():
            values = non_tensor_values(source.get(key))
            for i in np.flatnonzero(rows).tolist():
                objects[i] = values[i]

    def request(self, name: str, indices, *args: Any, values=None) -> list:
        """Calls and attribute writes go to a wrapped gymnasium vector env, whose sub-envs
        they reach (``GymVectorEnvWrapper``); other envs have no sub-envs to reach."""
        vector_env = self.vector_env
        if vector_env is not None and indices is None and name in ("call", "set_attr"):
            if name == "call":
                method, args_, kwargs = args[:3]
                return list(vector_env.call(method, *args_, **kwargs))
            vector_env.set_attr(args[0], list(values))
            return [None] * self.num_envs
        raise NotImplementedError(
            f"{type(self.env).__name__} has no sub-envs to call methods on ({name!r})"
        )

    @property
    def vector_env(self) -> gym.vector.VectorEnv | None:
        """The gymnasium vector env the batched env wraps, if it wraps one."""
        vector_env = getattr(self.env, "vector_env", None)
        return vector_env if isinstance(vector_env, gym.vector.VectorEnv) else None

    @property
    def single_spaces(self) -> tuple[Any, Any] | None:
        """A wrapped vector env's own single spaces (the face then has the same ones)."""
        vector_env = self.vector_env
        if vector_env is None:
            return None
        return vector_env.single_observation_space, vector_env.single_action_space

    def close(self) -> None:
        self.env.close()


def unbatch_info(info: dict, n: int) -> list[dict]:
    """Each sub-env's info dict, from gymnasium's vector infos (arrays with ``_key`` masks,
    nested dicts with their own): the inverse of ``VectorEnv._add_info``, so that batching
    them again gives the same arrays (object arrays hold the sub-envs' own objects)."""
    per_env: list[dict] = [{} for _ in range(n)]
    for key, value in info.items():
        mask = info.get(f"_{key}")
        if (key.startswith("_") and key[1:] in info) or mask is None:
            continue  # a mask, or an entry without one (not gymnasium's layout)
        rows = np.flatnonzero(mask).tolist()
        if isinstance(value, dict):
            below = unbatch_info(value, n)
            for i in rows:
                per_env[i][key] = below[i]
            continue
        as_bool = isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.ndim == 1
        for i in rows:
            # a bool array holds Python bools (np.bool_ items would batch as objects)
            per_env[i][key] = bool(value[i]) if as_bool else value[i]
    return per_env
