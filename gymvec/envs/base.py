"""The tensordict-native environment API shared by every gymvec env.

Keys follow torchrl's conventions: observations at the root and under ``"next"``, ``"action"``
at the root, ``"reward"`` and the done flags (``"done"``, ``"terminated"``, ``"truncated"``,
trailing dim of 1) under ``"next"``. Numeric info entries that an env declares live under
``"info"``. A batched env never resets a sub-env on its own: ``reset(td)`` with a ``"_reset"``
mask resets the masked sub-envs only.

Example:
    >>> from gymvec import GymEnv
    >>> env = GymEnv("CartPole-v1")
    >>> env.set_seed(0)
    >>> td = env.rollout(5)
    >>> td["next", "reward"].shape
    torch.Size([5, 1])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict, TensorDictBase, is_non_tensor
from tensordict import stack as stack_tensordicts

from gymvec.common.fastpath import set_unchecked
from gymvec.common.reprs import never_raises
from gymvec.envs.sub_env_kind import env_base_kind
from gymvec.errors import ClosedEnvError
from gymvec.specs import (
    Categorical,
    Composite,
    DeviceLike,
    TensorSpec,
    Unbounded,
    non_tensor,
    object_values,
)
from gymvec.subenvs.kinds import register_kind

DONE_KEYS = ("done", "terminated", "truncated")


def step_mdp(td: TensorDictBase) -> TensorDictBase:
    """The root of the next step: ``td["next"]`` without its reward, as a new TensorDict.

    The leaves are shared with ``td["next"]``, nested TensorDicts are not: setting a nested key
    of the result (as resets do) leaves ``td["next"]`` unchanged.
    """
    next_td = td.get("next")
    return next_td.exclude("reward").clone(recurse=False)


def make_done_spec(batch_size: torch.Size) -> Composite:
    """The ``done``/``terminated``/``truncated`` flags, bool with a trailing dim of 1."""
    flag = Categorical(2, shape=(*batch_size, 1), dtype=torch.bool)
    return Composite({key: flag.clone() for key in DONE_KEYS}, shape=batch_size)


def make_reward_spec(batch_size: torch.Size, dtype: torch.dtype = torch.float32) -> TensorSpec:
    return Unbounded(shape=(*batch_size, 1), dtype=dtype)


class EnvBase:
    """Base class of tensordict-native envs.

    Subclasses set ``observation_spec``, ``action_spec`` (or ``full_action_spec``),
    ``reward_spec`` and ``done_spec`` and implement ``_reset(td) -> td``,
    ``_step(td) -> next_td`` and ``_set_seed(seed)``.
    """

    def __init__(self, *, batch_size: Sequence[int] = (), device: DeviceLike = None) -> None:
        self.batch_size = torch.Size(batch_size)
        self.device = torch.device("cpu" if device is None else device)
        self.observation_spec = Composite(shape=self.batch_size)
        self.full_action_spec = Composite(shape=self.batch_size)
        self.reward_spec = make_reward_spec(self.batch_size)
        self.done_spec = make_done_spec(self.batch_size)
        self.state_spec = Composite(shape=self.batch_size)
        self.info_spec = Composite(shape=self.batch_size)
        self._closed = False

    # ---- specs ------------------------------------------------------------------------------
    @property
    def action_spec(self) -> TensorSpec:
        """The spec of ``"action"`` (a leaf spec, or a Composite for Dict actions)."""
        return self.full_action_spec["action"]

    @action_spec.setter
    def action_spec(self, spec: TensorSpec) -> None:
        self.full_action_spec = Composite({"action": spec}, shape=self.batch_size)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvError(f"{type(self).__name__} is closed: create a new env to go on")

    # ---- the API ------------------------------------------------------------------------------
    def reset(self, td: TensorDictBase | None = None) -> TensorDictBase:
        """Reset (the sub-envs masked by ``td["_reset"]``, or all) and return the new root."""
        self._check_open()
        if td is not None and "_reset" in td.keys():
            self._check_reset_mask(td.get("_reset"))
        return self._reset(td)

    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Apply ``td["action"]``; the transition lands in ``td["next"]``; returns ``td``."""
        self._check_open()
        self._check_action(td)
        set_next(td, self._step(td))
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset the sub-envs that are done.

        Returns ``(td, next_root)``: ``td`` holds the true transition in ``td["next"]``;
        ``next_root`` is the root of the next step, with reset observations where a sub-env
        finished.
        """
        td = self.step(td)
        root = self._step_mdp(td)
        done = root.get("done")
        if done.any():
            root.set("_reset", done.clone())
            reset_td = self.reset(root)
            root = _merge_reset(root, reset_td, done)
        return td, root

    def rand_action(self, td: TensorDictBase | None = None) -> TensorDictBase:
        """Put a random action from ``action_spec`` in ``td`` (a new TensorDict if None)."""
        if td is None:
            td = TensorDict(batch_size=self.batch_size, device=self.device)
        td.set("action", self.action_spec.rand())
        return td

    def rollout(
        self,
        max_steps: int,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        break_when_any_done: bool = True,
        auto_reset: bool = True,
        tensordict: TensorDictBase | None = None,
    ) -> TensorDictBase:
        """Run ``max_steps`` steps; the result is stacked along a new trailing time dim.

        With ``break_when_any_done`` the rollout stops at the first step where any sub-env is
        done; otherwise finished sub-envs are reset (explicitly, with a ``"_reset"`` mask) and
        the rollout goes on.
        """
        if auto_reset:
            td = self.reset(tensordict)
        elif tensordict is None:
            raise ValueError("rollout(auto_reset=False) needs a tensordict to start from")
        else:
            td = tensordict
        steps = []
        for _ in range(max_steps):
            td = policy(td) if policy is not None else self.rand_action(td)
            if break_when_any_done:
                td = self.step(td)
                steps.append(td)
                if td.get(("next", "done")).any():
                    break
                td = self._step_mdp(td)
            else:
                td, next_root = self.step_and_maybe_reset(td)
                steps.append(td)
                td = next_root
        return stack_tensordicts(steps, dim=len(self.batch_size))

    def set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        """Seed the env; the next ``reset()`` starts from that seed (a batched env takes one
        seed, or None, per sub-env too)."""
        self._check_open()
        self._set_seed(seed)

    def close(self) -> None:
        """Release what the env holds. Closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._close()

    def to_gymnasium(self, **kwargs: Any) -> gym.vector.VectorEnv:
        """This env as a ``gymnasium.vector.VectorEnv`` (``gymvec.GymnasiumVectorEnv``)."""
        import gymvec  # the face sits above this layer: reached through the public API

        return gymvec.GymnasiumVectorEnv(self, **kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ---- checks -------------------------------------------------------------------------------
    def _check_action(self, td: TensorDictBase) -> None:
        action = td.get("action", None)
        if action is None:
            raise KeyError(f"step() needs an 'action' entry; the tensordict has {list(td.keys())}")
        self.action_spec.validate(action, "action")

    def _check_reset_mask(self, mask: torch.Tensor) -> None:
        expected = (*self.batch_size, 1)
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError(
                f'"_reset": expected a bool tensor of shape {expected}, got {_describe(mask)}'
            )
        if tuple(mask.shape) not in (expected, tuple(self.batch_size)):
            raise ValueError(
                f'"_reset": expected a bool tensor of shape {expected}, got {_describe(mask)}'
            )

    def _step_mdp(self, td: TensorDictBase) -> TensorDictBase:
        """The root of the next step (:func:`step_mdp`; envs whose rewards sit elsewhere than
        ``"reward"`` leave those out too)."""
        return step_mdp(td)

    # ---- to implement -------------------------------------------------------------------------
    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        raise NotImplementedError

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError

    def _set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    @never_raises
    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={tuple(self.batch_size)}, device={self.device})"


def _merge_reset(root: TensorDictBase, reset_td: TensorDictBase, mask: torch.Tensor):
    """``root`` with the entries of ``reset_td`` where ``mask`` (shape B + (1,)) is set."""
    root = root.exclude("_reset")
    mask = mask.reshape(root.batch_size)
    for key, value in _leaves(reset_td):
        if key not in root.keys(include_nested=True):
            root.set(key, value)
        elif is_non_tensor(value):  # objects (values of spaces without a fixed shape)
            copy_object_rows(root, reset_td, key, mask.reshape(-1).tolist())
        else:
            current = root.get(key)
            row_mask = mask.reshape(mask.shape + (1,) * (current.ndim - mask.ndim))
            root.set(key, torch.where(row_mask, value, current))
    return root


def _leaves(td: TensorDictBase, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """(key, value) of every tensor and non-tensor leaf (tensordict's ``keys(leaves_only)``
    leaves the non-tensor ones out)."""
    leaves = []
    for name, value in td.items():
        key = (*prefix, name)
        if isinstance(value, TensorDictBase) and not is_non_tensor(value):
            leaves += _leaves(value, key)
        else:
            leaves.append((key, value))
    return leaves


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r}"


def set_next(td: TensorDictBase, next_out: TensorDictBase) -> None:
    """``td.set("next", next_out)``, without its checks where they cannot fail."""
    if td.batch_size == next_out.batch_size and (td.device is None or td.device == next_out.device):
        # set() checks batch size and device (5 us a step), compared here.
        set_unchecked(td, "next", next_out)
    else:
        td.set("next", next_out)


def copy_object_rows(dest: TensorDictBase, source: TensorDictBase, key: Any, rows: Any) -> None:
    """``dest[key]`` takes ``source[key]``'s objects at ``rows`` (bools over the flattened
    batch) and keeps its own elsewhere: non-tensor entries cannot be written in place."""
    current, fresh = object_values(dest.get(key)), object_values(source.get(key))
    merged = [new if row else old for new, old, row in zip(fresh, current, rows)]
    dest.set(key, non_tensor(merged, dest.batch_size))


def copy_rows(dest: torch.Tensor, source: torch.Tensor, rows: Any) -> None:
    """``dest[rows] = source[rows]`` for a numpy bool mask ``rows``; through numpy on the CPU,
    where torch lacks masked writes for some dtypes (uint16, uint32)."""
    if dest.device.type == "cpu" and source.device.type == "cpu":
        dest.detach().numpy()[rows] = source.detach().numpy()[rows]
    else:
        index = torch.from_numpy(rows).to(dest.device)
        dest[index] = source.to(dest.device)[index]


def copy_shared_rows(
    dest: TensorDictBase, source: TensorDictBase, rows: Any, skip: tuple[str, ...] = ()
) -> None:
    """``dest[key][rows] = source[key][rows]`` for every tensor leaf both have (cast and shaped
    as ``dest``'s) but those under the top-level keys in ``skip``."""
    in_source = source.keys(include_nested=True, leaves_only=True)
    for key in dest.keys(include_nested=True, leaves_only=True):
        top = key[0] if isinstance(key, tuple) else key
        if top in skip or key not in in_source:
            continue
        target = dest.get(key)
        copy_rows(target, source.get(key).to(target.dtype).reshape(target.shape), rows)


# The engine runs EnvBase sub-envs once this module is loaded (see engine.sub_env_kinds).
register_kind(env_base_kind(EnvBase))
