"""``gymvec.pettingzoo.make_env``: PettingZoo parallel envs as a tensordict batched env in
torchrl's multi-agent layout (:class:`PettingZooEnv`), one :class:`EnvRowsBlock` per
worker under gymvec's ``SerialEnv``/``ParallelEnv``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from pettingzoo import ParallelEnv
from tensordict import TensorDict, TensorDictBase

from gymvec.common.cores import usable_cores
from gymvec.common.faults import Restart, parse_on_fault
from gymvec.common.reprs import never_raises
from gymvec.envs.base import DONE_KEYS, EnvBase
from gymvec.envs.batched import BatchedEnvBase
from gymvec.pettingzoo.agents import check_parallel_env, close_env, common_spaces, default_groups
from gymvec.pettingzoo.env_rows import EnvRowsBlock
from gymvec.pettingzoo.table import check_groups
from gymvec.specs import Categorical, Composite, TensorSpec, Unbounded
from gymvec.subenvs.layout import WorkerLayout

BACKENDS = ("serial", "parallel")


class PettingZooEnv(EnvBase):
    """A batched env of :class:`EnvRowsBlock` rows (one per PettingZoo env) in
    torchrl's multi-agent layout. Per group ``g`` of ``n`` agents:

    * ``(g, "observation")``, ``(g, "mask")`` (bool: the agent acted in this step, or is
      present after a reset), ``(g, "action_mask")`` (bool, where the agents' infos carry
      one) and ``(g, "done")``/``"terminated"``/``"truncated"`` (``[num_envs, n, 1]``), at the
      root and in ``"next"``; ``("next", g, "reward")`` (``[num_envs, n, 1]``, float32);
      ``(g, "action")`` as input. Each group's entries sit in a ``Composite`` of shape
      ``[num_envs, n]``.
    * Per env, ``"done"``/``"terminated"``/``"truncated"`` (``[num_envs, 1]``): done when no
      agent is left (see :class:`EnvRowsBlock`).

    ``reward_spec`` is the ``Composite`` of the groups' rewards (torchrl's
    ``full_reward_spec``); ``action_spec`` is ``full_action_spec``. ``step_and_maybe_reset``
    resets the envs that are done (one round trip to the workers); ``reset(td)`` with
    ``"_reset"`` (``[num_envs, 1]``) resets those envs only. Agents' other infos reach
    ``env.batched.last_extras``. Build it with :func:`make_env`.

    Args:
        batched: a ``SerialEnv``/``ParallelEnv`` whose sub-envs are ``EnvRowsBlock`` s
            of the same groups.
        groups: group name -> agents, as the blocks have them.
    """

    def __init__(self, batched: BatchedEnvBase, groups: dict[str, list[str]]) -> None:
        super().__init__(batch_size=batched.batch_size, device=batched.device)
        self.batched = batched
        self.group_map = {name: list(agents) for name, agents in groups.items()}
        N = batched.batch_size
        inner = batched.observation_spec
        flag = Categorical(2, shape=(1,), dtype=torch.bool)
        self.observation_spec = Composite(shape=N)
        self.full_action_spec = Composite(shape=N)
        self.reward_spec = Composite(shape=N)
        # (with on_fault restarting, the batched env's "fault" flag too: see envs/faulted_rows)
        self._flags = tuple(
            str(key) for key in batched.done_spec.keys(include_nested=False, leaves_only=True)
        )
        self.done_spec = Composite({key: flag.expand(*N) for key in self._flags}, shape=N)
        for name, agents in self.group_map.items():
            shape = (*N, len(agents))
            group = Composite(shape=shape)
            for key, spec in _leaves(inner[name, "observation"]):
                group[("observation", *key)] = spec.clone()
            group["mask"] = Categorical(2, shape=shape, dtype=torch.bool)
            if (name, "action_mask") in inner:
                mask_shape = inner[name, "action_mask"].shape
                group["action_mask"] = Categorical(2, shape=mask_shape, dtype=torch.bool)
            self.observation_spec[name] = group
            action = Composite(shape=shape)
            for key, spec in _leaves(batched.full_action_spec["action", name]):
                action[("action", *key)] = spec.clone()
            self.full_action_spec[name] = action
            self.reward_spec[name] = Composite(
                {"reward": Unbounded(shape=(*shape, 1), dtype=torch.float32)}, shape=shape
            )
            self.done_spec[name] = Composite(
                {key: flag.expand(*shape) for key in DONE_KEYS}, shape=shape
            )

    # ---- specs --------------------------------------------------------------------------------
    @property
    def action_spec(self) -> TensorSpec:
        """The groups' actions (``full_action_spec``: ``(group, "action")`` keys)."""
        return self.full_action_spec

    @action_spec.setter
    def action_spec(self, spec: TensorSpec) -> None:
        if not isinstance(spec, Composite):
            raise TypeError(
                f"action_spec: expected a Composite of (group, 'action') specs, got {spec!r}"
            )
        self.full_action_spec = spec

    @property
    def full_reward_spec(self) -> Composite:
        return self.reward_spec  # type: ignore[return-value]

    # ---- the API ------------------------------------------------------------------------------
    def rand_action(self, td: TensorDictBase | None = None) -> TensorDictBase:
        """Put a random ``(group, "action")`` per group in ``td`` (a new TensorDict if None)."""
        if td is None:
            td = TensorDict(batch_size=self.batch_size, device=self.device)
        td.update(self.full_action_spec.rand())
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset the envs that are done (in the same round trip to the workers);
        returns ``(td, next_root)`` as :meth:`EnvBase.step_and_maybe_reset`."""
        self._check_open()
        inner = self._inner_actions(td)
        inner, root = self.batched.step_and_maybe_reset(inner)
        td.set("next", self._outer(inner.get("next"), with_reward=True))
        return td, self._outer(root, with_reward=False)

    def _step_mdp(self, td: TensorDictBase) -> TensorDictBase:
        root = super()._step_mdp(td)
        return root.exclude(*((name, "reward") for name in self.group_map))

    def _check_action(self, td: TensorDictBase) -> None:
        pass  # (the actions are checked where _step hands them on: see _inner_actions)

    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        inner = None
        if td is not None and "_reset" in td.keys():
            inner = TensorDict({"_reset": td.get("_reset")}, batch_size=self.batch_size)
        return self._outer(self.batched.reset(inner), with_reward=False)

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        inner = self.batched.step(self._inner_actions(td))
        return self._outer(inner.get("next"), with_reward=True)

    def _set_seed(self, seed: Any) -> None:
        self.batched.set_seed(seed)

    def _close(self) -> None:
        self.batched.close()

    def __getattr__(self, name: str) -> Any:
        # the PettingZoo envs' attributes and methods, as the batched env forwards them
        if name.startswith("_") or "batched" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.batched, name)

    @never_raises
    def __repr__(self) -> str:
        groups = {name: len(agents) for name, agents in self.group_map.items()}
        return f"{type(self).__name__}(batched={self.batched!r}, groups={groups})"

    # ---- layouts ------------------------------------------------------------------------------
    def _inner_actions(self, td: TensorDictBase) -> TensorDict:
        """The batched env's ``("action", group)`` entries from ``td``'s ``(group, "action")``
        (a KeyError naming a missing one; the batched env checks the values)."""
        actions = TensorDict(batch_size=self.batch_size, device=td.device)
        for name in self.group_map:
            action = td.get((name, "action"), None)
            if action is None:
                raise KeyError(
                    f"step() needs a {(name, 'action')} entry for group {name!r}; the "
                    f"tensordict has {td.keys(include_nested=True, leaves_only=True)}"
                )
            actions.set(("action", name), action)
        return actions

    def _outer(self, inner: TensorDictBase, with_reward: bool) -> TensorDict:
        """The multi-agent layout of the batched env's root or ``"next"``."""
        out = TensorDict({key: inner.get(key) for key in self._flags}, batch_size=self.batch_size)
        for name, agents in self.group_map.items():
            entry = inner.get(name)
            group = TensorDict(batch_size=(*self.batch_size, len(agents)))
            observation = entry.get("observation")
            if isinstance(observation, TensorDictBase):
                for key in observation.keys(include_nested=True, leaves_only=True):
                    key = key if isinstance(key, tuple) else (key,)
                    group.set(("observation", *key), observation.get(key))
            else:
                group.set("observation", observation)
            group.set("mask", entry.get("mask").bool())
            if "action_mask" in entry.keys():
                group.set("action_mask", entry.get("action_mask").bool())
            terminated = entry.get("terminated").bool().unsqueeze(-1)
            truncated = entry.get("truncated").bool().unsqueeze(-1)
            group.set("done", terminated | truncated)
            group.set("terminated", terminated)
            group.set("truncated", truncated)
            if with_reward:
                group.set("reward", entry.get("reward").to(torch.float32).unsqueeze(-1))
            out.set(name, group)
        return out


def _leaves(spec: TensorSpec) -> list[tuple[tuple, TensorSpec]]:
    """(key as a tuple, leaf spec) of each leaf of ``spec`` (``((), spec)`` for a leaf)."""
    if not isinstance(spec, Composite):
        return [((), spec)]
    return [
        (key if isinstance(key, tuple) else (key,), leaf)
        for key, leaf in spec.items(include_nested=True, leaves_only=True)
    ]


def make_env(
    env_fn: Callable[[], ParallelEnv],
    num_envs: int,
    *,
    group_map: dict[str, list[str]] | None = None,
    backend: str = "parallel",
    num_workers: int | None = None,
    on_fault: str | Restart = "raise",
    **options: Any,
) -> PettingZooEnv:
    """``num_envs`` PettingZoo parallel envs as a tensordict batched env (batch
    ``[num_envs]``) in torchrl's multi-agent layout (see :class:`PettingZooEnv`).

    The envs are spread over the workers as gymvec spreads sub-envs
    (``WorkerLayout.plan``); each worker holds one :class:`EnvRowsBlock` of its envs.
    Env ``e`` is seeded ``s + e`` by ``set_seed(s)``.

    Args:
        env_fn: builds one PettingZoo ``ParallelEnv`` (picklable for the parallel backend).
        num_envs: how many PettingZoo envs.
        group_map: group name -> agents (every possible agent in exactly one group, agents of
            a group sharing their spaces; groups may differ). Default:
            :func:`~gymvec.pettingzoo.default_groups` (``adversary_0..2`` -> "adversary").
        backend: "parallel" (``ParallelEnv``, worker processes) or "serial" (``SerialEnv``).
        num_workers: blocks (worker processes for "parallel"; default: one per usable core,
            at most one per env; 1 for "serial").
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart``: a faulted block is
            rebuilt and its envs read as truncated (see ``docs/faults.md``).
        **options: ``ParallelEnv``'s or ``SerialEnv``'s own (``device``, ``timeout``,
            ``local_worker``...).

    One env is built here first, to check it and its groups (a TypeError for an AEC env, a
    ValueError for a bad ``group_map`` or a group of agents with different spaces) before
    any worker starts.
    """
    from gymvec.envs.parallel_env import ParallelEnv as BatchedParallelEnv
    from gymvec.envs.serial_env import SerialEnv
    from gymvec.subenvs.factories import BlockFactory

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    parse_on_fault(on_fault)  # a bad one is refused before an env is built
    if num_workers is None and backend == "serial":
        num_workers = 1
    elif num_workers is None:
        num_workers = min(usable_cores(), num_envs) if isinstance(num_envs, int) else None
    layout = WorkerLayout.plan(num_envs, num_workers=num_workers)
    groups = _groups_of(env_fn, group_map)
    factories = [
        BlockFactory(
            functools.partial(EnvRowsBlock, env_fn, share, groups=groups, copy=False),
            share,
        )
        for share in layout.sub_envs_per_worker
    ]
    cls = SerialEnv if backend == "serial" else BatchedParallelEnv
    batched = cls(layout.num_workers, factories, on_fault=on_fault, **options)
    return PettingZooEnv(batched, groups)


def _groups_of(
    env_fn: Callable[[], ParallelEnv], group_map: dict[str, list[str]] | None
) -> dict[str, list[str]]:
    """The groups of one env built here (``group_map`` checked, or the default groups), after
    checking that each group's agents share their spaces."""
    env = env_fn()
    try:
        check_parallel_env(env)
        agents = list(env.possible_agents)
        groups = default_groups(agents) if group_map is None else check_groups(group_map, agents)
        for name, members in groups.items():
            advice = f"so group {name!r} cannot hold them: group agents that share their spaces"
            common_spaces(env, members, advice)
        return groups
    finally:
        close_env(env)
