"""``TorchRLEnvWrapper``: a batched torchrl env as a gymvec ``EnvBase``, and so (through
``gymvec.GymnasiumVectorEnv``) as a gymnasium ``VectorEnv``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Composite as TorchRLComposite
from torchrl.envs import EnvBase as TorchRLEnvBase
from torchrl.envs import TransformedEnv
from torchrl.envs.batched_envs import BatchedEnvBase as TorchRLBatchedEnv

from gymvec.common.reprs import never_raises
from gymvec.envs.base import DONE_KEYS, EnvBase, _merge_reset, set_next
from gymvec.specs import Composite
from gymvec.torchrl.gymvec_wrapper import GymvecWrapper
from gymvec.torchrl.specs import from_torchrl_spec


class TorchRLEnvWrapper(EnvBase):
    """A batched torchrl env (``ParallelEnv``, ``SerialEnv``, a ``TransformedEnv`` of one, any
    ``torchrl.envs.EnvBase`` with a batch size) as a gymvec ``EnvBase``: gymvec's specs
    (converted from torchrl's, see ``gymvec.torchrl.specs``) over torchrl's calls.

    torchrl envs carry state in the tensordicts they return (``StepCounter``'s
    ``"step_count"``, ``RewardSum``'s ``"episode_reward"``...), so the wrapper keeps the last
    root and steps from it: ``step(td)`` takes the actions (and any other entries) of ``td``
    and the rest of the last root. ``step_and_maybe_reset`` is torchrl's own;
    ``autoreset_step`` (the gymnasium face's NEXT_STEP) resets the sub-envs that finished last
    step with a ``"_reset"`` mask and steps the others with torchrl's ``"_step"`` mask.

    Seeding: torchrl's batched envs take one int seed and derive each sub-env's from it
    (``set_seed(s)`` here is torchrl's ``set_seed(s)`` at the next reset); a list of seeds
    raises ValueError.

    Example:
        >>> from torchrl.envs import GymEnv, SerialEnv
        >>> import gymvec
        >>> from gymvec.torchrl import from_torchrl
        >>> penv = SerialEnv(2, lambda: GymEnv("CartPole-v1", categorical_action_encoding=True))
        >>> vec = gymvec.GymnasiumVectorEnv(from_torchrl(penv), autoreset_mode="same_step")
        >>> obs, info = vec.reset(seed=0)
        >>> obs.shape, vec.single_action_space
        ((2, 4), Discrete(2))
        >>> vec.close()
    """

    def __init__(self, env: TorchRLEnvBase) -> None:
        if not isinstance(env, TorchRLEnvBase):
            raise TypeError(
                f"TorchRLEnvWrapper expects a torchrl.envs.EnvBase, got {type(env).__name__}"
            )
        if not env.batch_size:
            raise ValueError("TorchRLEnvWrapper expects a batched torchrl env (batch size [n])")
        super().__init__(batch_size=env.batch_size, device=env.device)
        self.torchrl_env = env
        self.num_envs = env.batch_size.numel()
        dims = len(env.batch_size)
        self.observation_spec = _composite(env.full_observation_spec, dims, "observation_spec")
        self.full_action_spec = _composite(env.full_action_spec, dims, "full_action_spec")
        self.reward_spec = from_torchrl_spec(env.reward_spec, dims, "reward_spec")
        self.done_spec = _composite(env.full_done_spec, dims, "done_spec")
        self._root: TensorDictBase | None = None
        self._finished = np.zeros(self.num_envs, dtype=bool)
        self._pending_seed: int | None = None

    # ---- EnvBase ------------------------------------------------------------------------------
    def _set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        if seed is not None and not isinstance(seed, int | np.integer):
            raise ValueError(
                "seed: torchrl's batched envs take one int seed for all their sub-envs (each "
                f"sub-env's is derived from it), got {seed!r}"
            )
        self._pending_seed = None if seed is None else int(seed)

    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        env = self.torchrl_env
        if self._pending_seed is not None:
            seed, self._pending_seed = self._pending_seed, None
            env.set_seed(seed)
        mask = None if td is None else td.get("_reset", None)
        if mask is not None and bool(mask.all()):
            mask = None
        if mask is None:
            root = env.reset()
            self._finished[:] = False
        elif self._root is None:
            raise RuntimeError("the first reset of TorchRLEnvWrapper must reset every sub-env")
        else:
            mask = mask.reshape(*self.batch_size, 1).to(env.device)
            request = self._root.copy()
            request.set("_reset", mask)
            root = env.reset(request)
            root.pop("_reset", None)
            self._finished &= ~mask.reshape(-1).cpu().numpy()
        self._root = root.copy()
        return root

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        out = self.torchrl_env.step(self._step_input(td))
        self._root = self.torchrl_env.step_mdp(out)
        next_td = out.get("next")
        self._finished = _done_rows(next_td, self.num_envs)
        return next_td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """torchrl's ``step_and_maybe_reset``: the true transition in ``td["next"]``, the next
        root (reset observations where a sub-env finished)."""
        self._check_open()
        self._check_action(td)
        out, root = self.torchrl_env.step_and_maybe_reset(self._step_input(td))
        set_next(td, out.get("next"))
        self._root = root.copy()
        self._finished[:] = False
        return td, root

    def can_autoreset_step(self, resetting: np.ndarray) -> bool:
        """Whether ``autoreset_step`` resets exactly ``resetting`` (the sub-envs that finished
        last step) while the others step: torchrl steps a subset of a batched env, or of an
        env whose batch is not locked, with a ``"_step"`` mask."""
        base = self.torchrl_env
        while isinstance(base, TransformedEnv):
            base = base.base_env
        partial = isinstance(base, TorchRLBatchedEnv) or not base.batch_locked
        return partial and np.array_equal(self._finished, resetting)

    def autoreset_step(self, td: TensorDictBase) -> TensorDictBase:
        """gymnasium's NEXT_STEP step: the sub-envs that finished last step are reset (their
        actions ignored; in ``td["next"]`` their reset observation, reward 0, flags False)
        while the others step."""
        self._check_open()
        self._check_action(td)
        env = self.torchrl_env
        resetting = torch.from_numpy(self._finished.copy()).reshape(*self.batch_size, 1)
        request = self._current_root().copy()
        request.set("_reset", resetting.to(env.device))
        reset_root = env.reset(request)
        reset_root.pop("_reset", None)
        self._root = reset_root.copy()
        step_input = self._step_input(td)
        step_input.set("_step", ~resetting.reshape(self.batch_size).to(env.device))
        out = env.step(step_input)
        out.pop("_step", None)
        fresh = reset_root.select(*out.get("next").keys(True, True), strict=False)
        next_td = _merge_reset(out.get("next"), fresh.exclude("reward"), resetting)
        reward = next_td.get("reward")
        next_td.set("reward", torch.where(resetting.to(reward.device), 0, reward).to(reward.dtype))
        for key in DONE_KEYS:
            if key in next_td.keys():
                flag = next_td.get(key)
                next_td.set(key, flag & ~resetting.to(flag.device).reshape(flag.shape))
        out.set("next", next_td)
        self._root = env.step_mdp(out)
        self._finished = _done_rows(next_td, self.num_envs)
        set_next(td, next_td)
        return td

    def _step_input(self, td: TensorDictBase) -> TensorDictBase:
        """The last root with ``td``'s entries (the actions) in it: what torchrl steps from."""
        step_input = self._current_root().copy()
        step_input.update(td.exclude("next"))
        return step_input

    def _current_root(self) -> TensorDictBase:
        if self._root is None:
            raise RuntimeError("TorchRLEnvWrapper: call reset() before step()")
        return self._root

    def _close(self) -> None:
        self.torchrl_env.close(raise_if_closed=False)

    @never_raises
    def __repr__(self) -> str:
        inner = type(self.torchrl_env).__name__
        return f"{type(self).__name__}({inner}, batch_size={tuple(self.batch_size)})"


def _composite(spec: TorchRLComposite, batch_dims: int, path: str) -> Composite:
    """``from_torchrl_spec`` of one of torchrl's full specs (Composites, converted to one)."""
    return cast(Composite, from_torchrl_spec(spec, batch_dims, path))


def _done_rows(next_td: TensorDictBase, n: int) -> np.ndarray:
    return next_td.get("done").reshape(n).cpu().numpy().copy()


def from_torchrl(env: TorchRLEnvBase) -> EnvBase:
    """A batched torchrl env as a gymvec ``EnvBase`` (see :class:`TorchRLEnvWrapper`); a
    :class:`GymvecWrapper` gives back the gymvec env it wraps."""
    if isinstance(env, GymvecWrapper):
        return env.gymvec_env
    return TorchRLEnvWrapper(env)
