"""Any batched ``EnvBase`` as an engine: the gymnasium face over the tensordict API.

``SerialEnv`` and ``ParallelEnv`` run on a ``BatchEngine``, which the face drives directly.
Other batched envs (``GymVectorEnvWrapper``, a user's vectorised torch env) only have the
tensordict API; :class:`TensorDictEngine` carries the engine's verbs out with their
``reset``/``step``/``step_and_maybe_reset`` and copies the results into private buffers of
the same layout, so the face has one code path (``engine.protocol.Engine``).

A NEXT_STEP step that steps some sub-envs and resets others needs an env that can do both in
one step: a ``GymVectorEnvWrapper`` of a NEXT_STEP vector env can (its vector env's own step
resets the finished sub-envs); other envs are refused under NEXT_STEP (use "same_step" or
"disabled").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict, TensorDictBase

from gymvec.common.faults import FaultBook
from gymvec.envs.base import EnvBase, copy_shared_rows
from gymvec.envs.sub_env_kind import buffer_tensordict
from gymvec.spaces import spaces_of_specs
from gymvec.specs import info_fields_of, non_tensor, object_values, spec_leaves
from gymvec.subenvs.probe import masked_seeds
from gymvec.wire.buffers import BufferLayout, Buffers, Slot, private_memory
from gymvec.wire.calls import Received
from gymvec.wire.commands import Extras


@runtime_checkable
class AutoresetStepEnv(Protocol):
    """An env whose own step can reset finished sub-envs (NEXT_STEP in one call): wrappers of
    NEXT_STEP vector envs (``GymVectorEnvWrapper``, ``TorchRLEnvWrapper``)."""

    def can_autoreset_step(self, resetting: np.ndarray) -> bool: ...

    def autoreset_step(self, td: TensorDictBase) -> TensorDictBase: ...


class TensorDictEngine:
    """A batched EnvBase (batch size ``[n]``) behind the engine's verbs (see
    ``engine.protocol.Engine``)."""

    def __init__(self, env: EnvBase):
        if len(env.batch_size) != 1:
            raise ValueError(
                f"the gymnasium face needs an env with one batch dim, got {tuple(env.batch_size)}"
            )
        self.env = env
        self.num_envs = self.num_sub_envs = env.batch_size[0]
        self.device = env.device
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.heterogeneous = False
        self.fault_book: FaultBook | None = (
            None  # (a tensordict env reports its faults in ("next", "fault"))
        )
        fields = info_fields_of(env.info_spec.unbatch(1))
        self.layout = BufferLayout(
            self.num_envs,
            spec_leaves(env.observation_spec.unbatch(1)),
            spec_leaves(env.full_action_spec.unbatch(1)),
            fields,
        )
        self.buffers = Buffers(self.layout, private_memory(self.layout.nbytes))
        self._views = buffer_tensordict(self.buffers)
        self._action_keys = [("action", *key[1:]) for key in self.layout.action_keys]
        self._all = np.ones(self.num_envs, dtype=bool)
        self.finished = np.zeros(self.num_envs, dtype=bool)
        self.any_finished = False
        self._command: tuple | None = None  # (kind, its arguments) until received
        self._request: tuple | None = None
        self._autoreset_stepper = env if isinstance(env, AutoresetStepEnv) else None

    # ---- verbs --------------------------------------------------------------------------------
    def sub_env_spaces(self) -> tuple[list[Any], list[Any]]:
        vector_env = self.vector_env
        if vector_env is not None:  # the face then has the wrapped vector env's own spaces
            single = vector_env.single_observation_space, vector_env.single_action_space
        else:
            observation_spec = self.env.observation_spec.unbatch(1)
            single = spaces_of_specs(observation_spec, self.env.full_action_spec.unbatch(1))
        return [single[0]] * self.num_envs, [single[1]] * self.num_envs

    def step_send(
        self,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        *,
        handout: bool = False,
    ) -> None:
        self._check_idle()
        self._command = ("step", autoreset)

    def reset_send(
        self,
        mask: np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        into: str = "root",
        handout: bool = False,
    ) -> None:
        self._check_idle()
        mask = self._all if mask is None else np.asarray(mask, dtype=bool).reshape(-1)
        self._command = ("reset", (mask, seeds, options, into == "next"))

    def recv(
        self, timeout: float | None = None, meanwhile: Callable[[int], object] | None = None
    ) -> Received:
        """Carry the command out (the wrapped env does it all here: nothing runs ahead, so
        nothing calls ``meanwhile``)."""
        if self._command is None:
            raise RuntimeError("no command in flight: call step_send() or reset_send() first")
        (kind, arguments), self._command = self._command, None
        if kind == "reset":
            mask, seeds, options, into_next = arguments
            self._reset(mask, seeds, options, into_next)
            self.finished[mask] = False
            self.any_finished = bool(self.finished.any())
            infos = self._infos("last_reset_info")
            extras = self._extras("next" if into_next else "root", infos, mask)
            return Received("reset", None if mask is self._all else mask, extras, None)
        if arguments is AutoresetMode.NEXT_STEP and self.any_finished:
            if not self._autoreset_step(self.finished.copy()):
                raise NotImplementedError(
                    f"{type(self.env).__name__} cannot step some sub-envs while resetting "
                    "others (NEXT_STEP autoreset): use autoreset_mode='same_step' or 'disabled'"
                )
            extras = self._extras("next", self._step_infos())
        else:
            extras = self._step(autoreset=arguments is AutoresetMode.SAME_STEP)
        if arguments is AutoresetMode.SAME_STEP:
            self.finished[:] = False
        else:
            np.copyto(self.finished, self.buffers.next.done)
        self.any_finished = bool(self.finished.any())
        return Received("step", None, extras, None)

    def learn_info_fields(self) -> None:
        """Nothing to learn: the env's ``info_spec`` fixes its info fields."""

    def check_blocks(self, requested: str, what: str, batch_size: int | None = None) -> None:
        """Nothing to check here: a batched env checks its blocks when it is built."""

    stuck: TimeoutError | None = None  # the wrapped env's calls have no timeout of their own
    timed_out = False

    def check_not_stuck(self) -> None:
        """Never stuck (see ``stuck``)."""

    has_observation_lanes = False  # (the wrapped env's outputs are copied in)

    def write_action(self, key: tuple, values: Any) -> None:
        self.buffers.write_action(key, values)

    def write_action_rows(self, key: tuple, rows: np.ndarray, values: Any) -> None:
        self.buffers.write_action_rows(key, rows, values)

    @property
    def in_flight(self) -> str | None:
        if self._command is not None:
            return self._command[0]
        return "request" if self._request is not None else None

    @property
    def idle(self) -> bool:
        return self.in_flight is None

    @property
    def interrupted(self) -> bool:
        return False  # everything runs within the calls: nothing is left half done

    def abandon(self) -> None:
        self._command = self._request = None

    def _check_idle(self) -> None:
        if self.in_flight is not None:
            raise RuntimeError(f"a {self.in_flight} is already in flight: receive it first")

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
        if per_env is None or not isinstance(info, dict) or "final_info" not in info:
            return per_env
        finals = unbatch_info(info["final_info"], self.num_envs)
        for i in np.flatnonzero(info.get("_final_info", ())).tolist():
            per_env[i] = {k: v for k, v in finals[i].items() if k not in self.layout.info_fields}
        return per_env

    @staticmethod
    def _extras(
        slot: Literal["root", "next"], infos: list[dict] | None, rows: np.ndarray | None = None
    ) -> dict[int, Extras]:
        if infos is None:
            return {}
        into_root = slot == "root"
        return {
            i: Extras(root=info) if into_root else Extras(next=info)
            for i, info in enumerate(infos)
            if info and (rows is None or rows[i])
        }

    def _autoreset_step(self, resetting: np.ndarray) -> bool:
        """NEXT_STEP over an env that resets finished sub-envs in its own step (a
        GymVectorEnvWrapper of a NEXT_STEP vector env): one step does the whole command."""
        stepper = self._autoreset_stepper
        if stepper is None or not stepper.can_autoreset_step(resetting):
            return False
        self._write_next(stepper.autoreset_step(self._action_td()).get("next"))
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
                self.env.set_seed(masked_seeds(seeds, mask))
        td = TensorDict({"_reset": torch.from_numpy(mask.copy()).unsqueeze(-1)}, [self.num_envs])
        out = self.env.reset(td if not mask.all() else None)
        target = self._views.get("next") if into_next else self._views
        slot = self.buffers.next if into_next else self.buffers.root
        self._copy_rows(target, slot, out, mask)
        slot.info_present[mask] = True
        if into_next:
            self.buffers.reward[mask] = 0.0

    def _step(self, autoreset: bool) -> dict[int, Extras]:
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
                extras.setdefault(i, Extras()).root = info.root
            # A SAME_STEP vector env hands the finished sub-envs' last observations over as
            # they returned them.
            final_obs = getattr(self.env, "last_step_info", {}).get("final_obs")
            if final_obs is not None:
                for i in np.flatnonzero(done).tolist():
                    extras.setdefault(i, Extras()).final_obs = final_obs[i]
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
        copy_shared_rows(target, source, rows, skip=("next", "action"))
        for key, objects in slot.objects.items():
            values = object_values(source.get(key))
            for i in np.flatnonzero(rows).tolist():
                objects[i] = values[i]

    def request(
        self, name: str, indices: Sequence[int] | None = None, /, *, timeout=None, **kwargs: Any
    ) -> list:
        """Calls and attribute writes go to a wrapped gymnasium vector env, whose sub-envs
        they reach (``GymVectorEnvWrapper``); other envs have no sub-envs to reach."""
        self.request_send(name, indices, **kwargs)
        return self.request_recv(timeout)

    def request_send(
        self, name: str, indices: Sequence[int] | None = None, /, **kwargs: Any
    ) -> None:
        self._check_idle()
        vector_env = self.vector_env
        if vector_env is None or indices is not None or name not in ("call", "set_attr"):
            raise NotImplementedError(
                f"{type(self.env).__name__} has no sub-envs to call methods on ({name!r})"
            )
        self._request = (vector_env, name, kwargs)

    def request_recv(self, timeout: float | None = None) -> list:
        if self._request is None:
            raise RuntimeError("no request in flight: call request_send() first")
        (vector_env, name, kwargs), self._request = self._request, None
        if name == "call":
            args, call_kwargs = kwargs.get("args", ()), kwargs.get("kwargs") or {}
            return list(vector_env.call(kwargs["name"], *args, **call_kwargs))
        vector_env.set_attr(kwargs["name"], list(kwargs["values"]))
        return [None] * self.num_envs

    @property
    def vector_env(self) -> gym.vector.VectorEnv | None:
        """The gymnasium vector env the batched env wraps, if it wraps one."""
        vector_env = getattr(self.env, "vector_env", None)
        return vector_env if isinstance(vector_env, gym.vector.VectorEnv) else None

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
