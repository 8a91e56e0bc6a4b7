"""One gymnasium ``Env`` as a tensordict-native :class:`EnvBase`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase

from gymvec.common.infos import InfoField, declared_fields, infer_info_fields, split_info
from gymvec.common.reprs import never_raises
from gymvec.common.structure import (
    Leaf,
    build_value,
    get_leaf,
    leaf_name,
    missing_entry_error,
    observation_leaves,
    space_leaves,
)
from gymvec.envs.base import DONE_KEYS, EnvBase
from gymvec.spaces import spec_from_space
from gymvec.specs import Composite, DeviceLike, info_spec_of
from gymvec.subenvs.kinds import register_gym_wrapper


class GymEnv(EnvBase):
    """A gymnasium env (an instance, or a registered id and ``gymnasium.make`` kwargs).

    Observations become tensordict keys (``"observation"`` for a non-Dict space, the Dict's own
    keys otherwise), ``terminated`` and ``truncated`` stay apart and ``done`` is their union.

    Infos: entries that are numbers, bools or numeric arrays of fixed shape become keys under
    ``"info"``. Building a ``GymEnv`` neither resets nor steps its env: the fields are learnt
    from the infos of the first ``reset()`` and the first ``step()`` (an entry first seen at
    that step is zero in its root), or given with ``info_fields`` (then nothing is learnt;
    ``probe_infos=False`` learns nothing either). As sub-envs of a batched env, only the
    ``info_fields`` given become keys; the other entries reach the parent as extras. The
    whole last info dicts stay reachable as ``last_reset_info`` and ``last_step_info``.

    Seeding: ``set_seed(s)`` then ``reset()`` equals gymnasium's ``env.reset(seed=s)``.

    Values of spaces without a fixed shape (Text, Graph, Sequence, OneOf, custom spaces) are
    Python objects under their key (``NonTensorData``; ``NonTensor`` specs that hold the space).

    Example:
        >>> env = GymEnv("CartPole-v1")
        >>> env.set_seed(0)
        >>> td = env.reset()
        >>> td = env.step(env.rand_action(td))
        >>> sorted(td["next"].keys())
        ['done', 'observation', 'reward', 'terminated', 'truncated']
    """

    def __init__(
        self,
        env: str | gym.Env,
        *,
        device: DeviceLike = None,
        info_fields: dict[str, Any] | None = None,
        probe_infos: bool = True,
        **make_kwargs: Any,
    ) -> None:
        super().__init__(device=device)
        if isinstance(env, str):
            env = gym.make(env, **make_kwargs)
        elif make_kwargs:
            raise TypeError(
                f"GymEnv got an env instance and make kwargs {sorted(make_kwargs)}: "
                "kwargs are for gymnasium.make and need an env id"
            )
        if not isinstance(env, gym.Env):
            raise TypeError(f"GymEnv expects a gymnasium.Env or an env id, got {type(env)!r}")
        self.env = env
        self.obs_leaves: list[Leaf] = observation_leaves(env.observation_space)
        self.action_leaves: list[Leaf] = space_leaves(env.action_space, ("action",))
        self.observation_spec = observation_spec_from_space(env.observation_space)
        self.action_spec = spec_from_space(env.action_space, "action_space", objects=True)
        self._pending_seed: int | None = None
        self.last_reset_info: dict = {}
        self.last_step_info: dict = {}
        self.info_fields: dict[str, InfoField] = declared_fields(info_fields)
        self.info_spec = info_spec_of(self.info_fields)
        # Until the first step: learn fields from the infos (none given, learning not refused)
        self._learning_infos = info_fields is None and probe_infos

    @property
    def render_mode(self) -> str | None:
        return self.env.render_mode

    def render(self) -> Any:
        return self.env.render()

    # ---- EnvBase ------------------------------------------------------------------------------
    def _set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        if isinstance(seed, Sequence):  # (gymnasium would refuse it at the reset)
            raise TypeError(f"GymEnv runs one env: expected an int seed or None, got {seed!r}")
        self._pending_seed = seed

    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        obs, info = self.env.reset(seed=self._pending_seed)
        self._pending_seed = None
        self.last_reset_info = info
        if self._learning_infos:
            self._learn_info_fields(info)
        out = self._observation_td(obs, info)
        false = torch.zeros(1, dtype=torch.bool)
        for key in DONE_KEYS:
            out.set(key, false.clone())
        return out

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        obs, reward, terminated, truncated, info = self.env.step(self.action_to_gym(td))
        self.last_step_info = info
        if self._learning_infos:
            self._learning_infos = False
            for name, field in self._learn_info_fields(info).items():
                # into the root too, which then stacks with the next ones (a rollout)
                td.set(("info", name), torch.as_tensor(np.zeros(field.shape, field.dtype)))
        out = self._observation_td(obs, info)
        out.set("reward", torch.tensor([reward], dtype=self.reward_spec.dtype))
        out.set("terminated", torch.tensor([bool(terminated)]))
        out.set("truncated", torch.tensor([bool(truncated)]))
        out.set("done", torch.tensor([bool(terminated or truncated)]))
        return out

    def _close(self) -> None:
        self.env.close()

    # ---- conversions --------------------------------------------------------------------------
    def action_to_gym(self, td: TensorDictBase) -> Any:
        """The action of ``td`` as the gymnasium env expects it."""
        arrays = [
            td.get_non_tensor(leaf.key)
            if leaf.is_object
            else td.get(leaf.key).detach().cpu().numpy()
            for leaf in self.action_leaves
        ]
        space = self.env.action_space
        if isinstance(space, spaces.Discrete):
            return arrays[0].item()
        return build_value(space, self.action_leaves, arrays)

    def _observation_td(self, obs: Any, info: dict) -> TensorDict:
        out = TensorDict(
            {
                leaf.key: torch.as_tensor(self._observation_leaf(obs, leaf))
                for leaf in self.obs_leaves
                if not leaf.is_object
            },
            batch_size=(),
            device=self.device,
        )
        for leaf in self.obs_leaves:
            if leaf.is_object:
                out.set_non_tensor(leaf.key, get_leaf(obs, leaf.path))
        if self.info_fields:
            declared, _ = split_info(info, self.info_fields)
            for name, field in self.info_fields.items():
                value = declared.get(name, np.zeros(field.shape, field.dtype))
                out.set(("info", name), torch.as_tensor(np.asarray(value, dtype=field.dtype)))
        return out

    def _observation_leaf(self, obs: Any, leaf: Leaf) -> np.ndarray:
        """``leaf``'s array of ``obs``, checked against the observation space's shape."""
        try:
            array = np.asarray(get_leaf(obs, leaf.path), dtype=leaf.dtype)
        except (KeyError, IndexError, TypeError) as exc:
            raise missing_entry_error(type(self.env.unwrapped).__name__, leaf.key, obs) from exc
        if array.shape != leaf.shape:  # no broadcasting, as in SyncVectorEnv
            raise ValueError(
                f"{type(self.env.unwrapped).__name__} returned observation "
                f"{leaf_name(leaf.key)!r} of shape {array.shape}; its observation space has "
                f"shape {leaf.shape}"
            )
        return array

    def _learn_info_fields(self, info: Any) -> dict[str, InfoField]:
        """Add fields for the numeric entries of ``info`` not known yet; returns those."""
        if not isinstance(info, dict):
            return {}
        new = {
            name: field
            for name, field in infer_info_fields(info).items()
            if name not in self.info_fields
        }
        if new:
            self.info_fields = {**self.info_fields, **new}
            self.info_spec = info_spec_of(self.info_fields)
        return new

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: forward public names to the gymnasium env so
        # that batched envs can dispatch methods and attributes to their sub-envs.
        if name.startswith("_") or "env" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            return self.__dict__["env"].get_wrapper_attr(name)
        except AttributeError:
            raise AttributeError(
                f"neither GymEnv nor the gymnasium env {self.__dict__['env']} has an "
                f"attribute {name!r}"
            ) from None

    @never_raises
    def __repr__(self) -> str:
        spec = getattr(self.env, "spec", None)
        name = spec.id if spec is not None else type(self.env.unwrapped).__name__
        return f"GymEnv({name})"


def observation_spec_from_space(space: spaces.Space, path: str = "observation_space") -> Composite:
    """The observation spec of a gymnasium observation space: a Dict's keys, or
    ``"observation"``. ``path`` names the space in error messages."""
    spec = spec_from_space(space, path, objects=True)
    if isinstance(space, spaces.Dict):
        return cast(Composite, spec)  # what a Dict space converts to
    return Composite({"observation": spec})


def _gym_env(env: GymEnv) -> gym.Env:
    return env.env


# The engine drives the gymnasium env inside a GymEnv directly (see engine.sub_env_kinds).
register_gym_wrapper(GymEnv, _gym_env)
