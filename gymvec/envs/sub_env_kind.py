"""gymvec's ``EnvBase`` as a kind of sub-env the engine runs (see ``engine.sub_env_kinds``).

Registered by ``envs.base`` when it is imported: the engine summarizes such a sub-env from
its specs, drives it through its tensordict API (:class:`TensorDictDriver`) and reads its
gymnasium spaces from the specs, without importing this layer or torch itself.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from gymnasium import spaces
from tensordict import TensorDict

from gymvec.errors import UnsupportedSpaceError
from gymvec.specs import info_fields_of, spec_leaves
from gymvec.subenvs.kinds import SubEnvKind, SubEnvSummary
from gymvec.wire.buffers import Buffers, Slot
from gymvec.wire.commands import NOTHING, Extras


def buffer_tensordict(buffers: Buffers) -> TensorDict:
    """Torch views of the buffers as a TensorDict (root, ``"next"`` and ``"action"``).

    Flags and reward get their trailing dim of 1. Writing into it writes the buffers.
    """
    n = buffers.layout.num_envs

    def slot_td(slot: Slot, with_reward: bool) -> TensorDict:
        td = TensorDict(batch_size=(n,), device="cpu")
        for key, array in slot.obs.items():
            td.set(key, torch.from_numpy(array))
        for name, array in slot.info.items():
            td.set(("info", name), torch.from_numpy(array))
        for name in ("done", "terminated", "truncated"):
            td.set(name, torch.from_numpy(getattr(slot, name)).unsqueeze(-1))
        if with_reward:
            td.set("reward", torch.from_numpy(slot.reward).unsqueeze(-1))
        return td

    td = slot_td(buffers.root, with_reward=False)
    for key, array in buffers.action.items():
        td.set(key, torch.from_numpy(array))
    td.set("next", slot_td(buffers.next, with_reward=True))
    return td


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
        self.td = buffer_tensordict(buffers)[index]
        self.action_keys = [("action", *key[1:]) for key in buffers.layout.action_keys]
        # float64 actions from the gymnasium face, cast into the leaf's own buffer before use
        self.wide_actions = [
            (buffers.action[key], *wide) for key, wide in buffers.wide_action.items()
        ]
        self.fields = buffers.layout.info_fields
        self.extras: Extras | None = None
        self.next_value: Any = NOTHING  # its observations are in the buffers only
        self.step_value: Any = NOTHING
        self.last_value: Any = None  # the tensordict of its last step or reset
        self.obs_form = None  # (see GymDriver: its observations are the buffers' own)
        self._pending_seed: int | None = None

    def fields_changed(self) -> None:
        """Info fields were learnt: an EnvBase sub-env's infos are its own keys, unchanged."""

    def step(self) -> bool:
        i = self.index
        for narrow, wide, is_wide in self.wide_actions:
            if is_wide[i]:
                narrow[i] = wide[i]
        action = TensorDict({key: self.td.get(key).clone() for key in self.action_keys})
        next_td = self.last_value = self.env.step(action).get("next")
        self._write(self.td.get("next"), next_td, with_reward=True)
        return bool(next_td.get("done").item())

    def reset(self, slot: Slot, seed: int | None, options: dict | None = None) -> None:
        if seed is not None:
            self.env.set_seed(seed)
        out = self.last_value = self.env.reset()
        target = self.td.get("next") if slot is self.next else self.td
        self._write(target, out, with_reward=False)
        if slot.reward is not None:
            slot.reward[self.index] = 0.0
        slot.terminated[self.index] = slot.truncated[self.index] = slot.done[self.index] = False

    def write_faulted(self, last: Any) -> None:
        """This row's step where the sub-env before this driver's faulted: ``last``, the
        tensordict of that one's last step or reset, into "next" (None: left as it is); the
        engine sets the reward and flags (see ``GymDriver.write_faulted``)."""
        self.last_value = last
        if last is not None:
            self._write(self.td.get("next"), last, with_reward=False)

    def _write(self, target: Any, source: Any, with_reward: bool) -> None:
        for key in target.keys(include_nested=True, leaves_only=True):
            if key == "reward" and not with_reward:
                continue
            key_tuple = key if isinstance(key, tuple) else (key,)
            if key_tuple[0] == "action" or key_tuple[0] == "next":
                continue
            if key in source.keys(include_nested=True):
                target.get(key).copy_(source.get(key).reshape(target.get(key).shape))


def summarize_env_base(env: Any, declared_infos: bool) -> SubEnvSummary:
    """The summary of an ``EnvBase`` sub-env, from its specs."""
    if tuple(env.batch_size) != ():
        raise ValueError(
            f"create_env_fn: sub-envs must have batch_size (), got {tuple(env.batch_size)}"
        )
    return SubEnvSummary(
        observation_leaves=spec_leaves(env.observation_spec),
        action_leaves=spec_leaves(env.full_action_spec),
        specs=(env.observation_spec, env.full_action_spec, env.reward_spec.dtype),
        info_fields=info_fields_of(env.info_spec) if declared_infos else None,
    )


def spaces_of_env_base(summary: SubEnvSummary) -> tuple[spaces.Space, spaces.Space]:
    """The gymnasium spaces of an ``EnvBase`` sub-env without spaces, from its specs."""
    from gymvec.spaces import spaces_of_specs

    observation_spec, full_action_spec, _ = cast(tuple, summary.specs)  # summarize_env_base sets
    return spaces_of_specs(observation_spec, full_action_spec)


def env_base_kind(cls: type) -> SubEnvKind:
    """``EnvBase`` (``cls``) as a kind of sub-env."""
    return SubEnvKind(cls, summarize_env_base, TensorDictDriver, spaces_of_env_base)
