"""``GymvecWrapper``: a batched gymvec env as a ``torchrl.envs.EnvBase``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase, is_non_tensor, is_tensor_collection
from torchrl._utils import seed_generator
from torchrl.envs import EnvBase as TorchRLEnvBase

from gymvec.common.fastpath import tensordict_unchecked
from gymvec.common.reprs import never_raises
from gymvec.envs.base import EnvBase
from gymvec.specs import Composite
from gymvec.torchrl.specs import to_torchrl_spec


class GymvecWrapper(TorchRLEnvBase):
    """A batched gymvec env (``SerialEnv``, ``ParallelEnv``, ``GymVectorEnvWrapper``, any
    batched ``gymvec.EnvBase``) as a torchrl env: torchrl's specs, its batch size and
    device, so that ``TransformedEnv``, the collectors, ``check_env_specs`` and the losses'
    spec checks take it.

    Steps go through the gymvec env's own ``step`` and ``step_and_maybe_reset`` (one round
    trip to the workers, which resets finished sub-envs too): the tensors it returns are handed
    to torchrl as they are, without another copy. ``reset`` with a ``"_reset"`` mask resets
    the masked sub-envs only. Numeric info entries (``("info", name)``) are observations.

    Seeding follows torchrl's batched envs of ``GymEnv``: ``set_seed(s)`` gives sub-env 0 the
    seed ``s``, each next one the seed torchrl derives from the previous one
    (``torchrl._utils.seed_generator``), resets every sub-env with its seed at once (as torchrl's
    gym wrappers do) and returns the seed after the last. Same seeds and actions then give the
    same data as torchrl's ``SerialEnv``/``ParallelEnv`` of ``GymEnv`` over the same envs.

    ``device_agnostic=True`` (a CPU gymvec env only) gives the wrapper no device
    (``device=None``), as torchrl's own ``GymEnv`` and its batched envs have by default: a
    collector built without a device then hands it each step's data as it is, where it casts
    the data of an env with a device to that device at every step (a copy of every entry; on
    CartPole about a third of a collector step's cost). Specs and data stay on the CPU.

    The wrapper owns the gymvec env: ``close()`` closes it.

    Example:
        >>> import gymnasium as gym
        >>> from gymvec import SerialEnv
        >>> from gymvec.torchrl import to_torchrl
        >>> from torchrl.envs.utils import check_env_specs
        >>> env = to_torchrl(SerialEnv(2, lambda: gym.make("CartPole-v1")))
        >>> check_env_specs(env)
        >>> env.rollout(3).batch_size
        torch.Size([2, 3])
        >>> env.close()
    """

    def __init__(
        self,
        env: EnvBase,
        *,
        allow_done_after_reset: bool = False,
        device_agnostic: bool = False,
    ) -> None:
        if not isinstance(env, EnvBase):
            raise TypeError(f"GymvecWrapper expects a gymvec EnvBase, got {type(env).__name__}")
        if not env.batch_size:
            raise ValueError("GymvecWrapper expects a batched gymvec env (batch size [n, ...])")
        if getattr(env, "heterogeneous", False):
            raise ValueError(
                "GymvecWrapper needs sub-envs with the same keys; this multi-task batch has "
                "tasks with different keys"
            )
        if device_agnostic and env.device.type != "cpu":
            raise ValueError(
                f"device_agnostic=True needs a gymvec env on the CPU; this one is on {env.device}"
            )
        super().__init__(
            device=None if device_agnostic else env.device,
            batch_size=env.batch_size,
            allow_done_after_reset=allow_done_after_reset,
        )
        self.gymvec_env = env
        device = env.device
        observation = env.observation_spec.clone()
        if len(env.info_spec.keys()):  # numeric info entries are outputs too
            observation["info"] = env.info_spec.clone()
        self.observation_spec = to_torchrl_spec(observation, device, "observation_spec")
        self.action_spec = to_torchrl_spec(env.full_action_spec, device, "full_action_spec")
        reward = env.reward_spec
        if not isinstance(reward, Composite):  # (a Composite: rewards by key, as multi-agent)
            reward = Composite({"reward": reward}, shape=env.batch_size)
        self.reward_spec = to_torchrl_spec(reward, device, "reward_spec")
        self.done_spec = to_torchrl_spec(env.done_spec, device, "done_spec")
        if len(env.state_spec.keys()):
            self.state_spec = to_torchrl_spec(env.state_spec, device, "state_spec")
        self.is_closed = False

    # ---- torchrl's EnvBase ---------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if kwargs:
            raise TypeError(f"GymvecWrapper.reset takes no reset kwargs, got {sorted(kwargs)}")
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            return self.gymvec_env.reset()
        reset_td = TensorDict({"_reset": mask}, batch_size=self.batch_size, device=mask.device)
        return self.gymvec_env.reset(reset_td)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        partial = tensordict.get("_step", None)
        if partial is not None and not bool(partial.all()):
            raise NotImplementedError(
                '"_step": gymvec envs step every sub-env at once; a partial step (of '
                f"{int(partial.sum())} of {partial.numel()} sub-envs) is not supported"
            )
        return self.gymvec_env.step(tensordict).get("next")

    def _step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        # torchrl's steps, then resets the finished sub-envs: two round trips to the workers.
        # The gymvec env does both in one; the result is torchrl's (step_mdp of the step, the
        # reset sub-envs' rows from their reset).
        if "_step" in tensordict.keys() or self._post_step_mdp_hooks is not None:
            # torchrl's path: partial steps (refused in _step) and hooks handled there
            return super()._step_and_maybe_reset(tensordict)
        if self.device is not None and tensordict.device != self.device:
            tensordict = tensordict.to(self.device)
        self._assert_tensordict_shape(tensordict)
        tensordict, root = self.gymvec_env.step_and_maybe_reset(tensordict)
        # torchrl's _step_proc_data (reward reshaped, missing done keys filled) has nothing to
        # do: gymvec's outputs hold every key of the specs, in their shapes.
        next_td = tensordict.get("next")
        zeroed = _partly_done(next_td.get("done"), self.batch_size)
        next_root = self._next_root(tensordict, next_td, root, zeroed)
        if next_root is None:
            next_root = self._next_root_by_step_mdp(tensordict, root, zeroed)
        return tensordict, next_root

    def _next_root(
        self,
        tensordict: TensorDictBase,
        next_td: TensorDictBase,
        root: TensorDictBase,
        zeroed: torch.Tensor | None,
    ) -> TensorDictBase | None:
        """torchrl's next root (``_step_mdp(tensordict)`` updated with ``root``) built in one
        go, or None where a layout calls for the general path (nested done, reward or reset
        keys, lazy stacks, named dims, a ``root`` without all of ``"next"``).

        It is ``root`` (all of ``"next"`` but the reward, the reset rows from the reset) with
        the entries of ``tensordict``'s root that step_mdp carries over and ``root`` lacks (the
        action, policy outputs, the collector's ids), zeros in the rows ``zeroed`` marks.
        Half the cost of step_mdp and update: neither reads every leaf, and nothing is checked
        that gymvec built right already.
        """
        dropped = self._dropped_root_names()
        if dropped is None or type(tensordict) is not TensorDict or type(root) is not TensorDict:
            return None
        returned = dict(root.items())
        for key, value in next_td.items():
            if key not in dropped and not _holds(returned.get(key), value):
                return None  # step_mdp would take some of it from "next"
        entries = {}
        for key, value in tensordict.items():
            if key in dropped:
                continue
            if key in returned:
                if not _holds(returned[key], value):
                    return None  # a nested entry that the reset returns only in part
                continue
            value = _carried(value, zeroed)
            if value is None:
                return None
            entries[key] = value
        for key, value in returned.items():
            # Nested TensorDicts are new ones (as step_mdp's are): setting into the next root
            # must leave the step's "next" unchanged.
            entries[key] = value if isinstance(value, torch.Tensor) else value.copy()
        # on the step's device, as step_mdp's (None for a device-less env's device-less data)
        return tensordict_unchecked(entries, self.batch_size, tensordict.device)

    def _dropped_root_names(self) -> frozenset | None:
        """The root entries step_mdp leaves out (``"next"``, the done, reset and reward keys;
        the done flags come from ``"next"``), or None where one of them is nested or a reward
        is also a state (then step_mdp takes it from ``"next"``)."""
        done, reset, reward = self.done_keys, self.reset_keys, self.reward_keys
        names = frozenset(("next", *done, *reset, *reward))
        if not all(type(key) is str for key in names) or set(reward) & set(self.state_keys):
            return None
        return names

    def _next_root_by_step_mdp(
        self, tensordict: TensorDictBase, root: TensorDictBase, zeroed: torch.Tensor | None
    ) -> TensorDictBase:
        """The general path of :meth:`_next_root`: torchrl's step_mdp, updated with ``root``."""
        next_root = self._step_mdp(tensordict)
        if zeroed is not None:
            returned = set(root.keys(True, True))
            for key in next_root.keys(True, True):
                value = next_root.get(key)
                if key not in returned and isinstance(value, torch.Tensor):
                    next_root.set(key, _zero_rows(value, zeroed))
        next_root.update(root)
        return next_root

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed every sub-env as torchrl's batched envs do (see the class docstring) and
        reset them; returns the next seed in torchrl's chain."""
        if seed is None:
            self.gymvec_env.set_seed(None)
            return None
        seeds = []
        for _ in range(self.gymvec_env.batch_size.numel()):
            seeds.append(seed)
            if not static_seed:
                seed = seed_generator(seed)
        self.gymvec_env.set_seed(seeds)
        self.gymvec_env.reset()
        return seed

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self.is_closed = True
        self.gymvec_env.close()

    @never_raises
    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gymvec_env!r})"


def _partly_done(done: torch.Tensor, batch_size: torch.Size) -> torch.Tensor | None:
    """The done flags (shaped as the batch) where some sub-envs finished but not all, the
    rows a partial reset zeroes; None otherwise."""
    # numpy counts on the CPU for a third of a torch reduction's cost
    finished = int(np.count_nonzero(done.numpy())) if done.is_cpu else int(done.sum())
    return done.reshape(batch_size) if 0 < finished < done.numel() else None


def _zero_rows(value: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``value`` with zeros in the ``rows`` (bools shaped as the batch) that are set."""
    if value.ndim > rows.ndim:
        rows = rows.reshape(*rows.shape, *(1,) * (value.ndim - rows.ndim))
    return value.masked_fill(rows, 0)


def _carried(value: Any, zeroed: torch.Tensor | None) -> Any:
    """A root entry as the next root carries it over: tensors as they are (zeros in the rows
    ``zeroed`` marks), plain nested TensorDicts as new ones over such tensors, non-tensor
    data copied (as step_mdp copies it); None for a nested entry that only the general path
    rebuilds exactly (a lazy stack, named dims)."""
    if isinstance(value, torch.Tensor):
        return value if zeroed is None else _zero_rows(value, zeroed)
    if type(value) is TensorDict:
        if zeroed is None:
            return value.copy()
        if any(name is not None for name in value.names):
            return None
        entries = {}
        for key, item in value.items():
            item = _carried(item, zeroed)
            if item is None:
                return None
            entries[key] = item
        return tensordict_unchecked(entries, value.batch_size, value.device)
    if is_non_tensor(value):
        return value.copy()
    return None


def _holds(mine: Any, theirs: Any) -> bool:
    """Whether ``mine`` (an entry of gymvec's next root, None if it has none) holds every leaf
    of ``theirs`` (the same entry of the step's root or of its "next"), so that an update with
    ``mine`` leaves nothing of ``theirs``."""
    if mine is None:
        return False
    if isinstance(mine, torch.Tensor) or isinstance(theirs, torch.Tensor):
        return True  # a leaf replaces whatever was there
    if not _is_node(mine) or not _is_node(theirs):
        return True
    names = set(mine.keys())
    return all(key in names and _holds(mine.get(key), item) for key, item in theirs.items())


def _is_node(value: Any) -> bool:
    """Whether ``value`` is a nested TensorDict (not a leaf: a tensor, non-tensor data)."""
    return is_tensor_collection(value) and not is_non_tensor(value)


def to_torchrl(env: EnvBase, **kwargs: Any) -> GymvecWrapper:
    """``env`` (a batched gymvec env) as a ``torchrl.envs.EnvBase`` (see
    :class:`GymvecWrapper`)."""
    return GymvecWrapper(env, **kwargs)
