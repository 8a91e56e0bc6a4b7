"""``EnvRowsBlock`` (also ``PettingZooEnvBlock``): PettingZoo parallel envs as one gymnasium
``VectorEnv`` whose rows are the envs, their agents in groups: the block under
:func:`gymvec.pettingzoo.make_env`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from pettingzoo import ParallelEnv

from gymvec.common.structure import build_value, get_leaf, space_leaves
from gymvec.pettingzoo.agents import default_groups
from gymvec.pettingzoo.table import AgentGroup, AgentTable
from gymvec.pettingzoo.table_block import TableBlock, check_counts

# The per-agent entries of a group's observation beside the agents' own observation.
RESULT_KEYS = ("mask", "reward", "terminated", "truncated")


class EnvRowsBlock(TableBlock):
    """PettingZoo parallel envs as one vector env whose rows are the envs, a row each.

    ``num_envs`` rows, in gymnasium's DISABLED autoreset mode (resets by
    ``options={"reset_mask": m}``).

    The observation of a row is a ``Dict`` with one entry per group of agents (``groups``:
    name -> agents; default :func:`~gymvec.pettingzoo.default_groups`), each a ``Dict`` of
    per-agent arrays (``n`` agents in the group, in the group's order): ``"observation"`` (the
    agents' common space batched ``n`` times), ``"mask"`` (MultiBinary ``n``: the agent acted
    in this step, or is present after a reset), ``"reward"`` (float64), ``"terminated"``,
    ``"truncated"``, and ``"action_mask"`` (MultiBinary ``(n, *mask shape)``) for a group whose
    agents' infos carry one (learnt from a reset of the first env here): the agent's mask, all
    ones for an agent present without one, zeros for one not present. An agent that is not
    alive holds a zero observation, reward 0 and both flags False. The action is a ``Dict`` of
    each group's actions (the agents' action space batched ``n`` times); only the live agents'
    reach the env.

    Per env: the reward is the sum of the agents' rewards; the env is done when no agent is
    left, ``terminated`` where an agent that left in that step terminated, else ``truncated``.
    An env that is done must be reset before it is stepped again. Other entries of the
    agents' infos come back as ``infos[agent][name]`` in gymnasium's vector info layout.

    Seeds: ``reset(seed=t)`` seeds env ``j`` with ``t + j`` (a list: one seed per env).
    """

    def __init__(
        self,
        env_fn: Callable[[], ParallelEnv],
        num_envs: int = 1,
        *,
        groups: dict[str, list[str]] | None = None,
        copy: bool = True,
    ):
        check_counts(num_envs=(num_envs, 1))
        if groups is None:
            probe = env_fn()
            try:
                groups = default_groups(list(getattr(probe, "possible_agents", [])))
            finally:
                getattr(probe, "close", lambda: None)()
        table = AgentTable(env_fn, num_envs, groups)
        super().__init__(table, rows_per_env=1, autoreset_mode=AutoresetMode.DISABLED, copy=copy)
        self.groups = {group.name: list(group.agents) for group in table.groups}
        try:
            self._masks = self._learn_action_masks()
        except BaseException:
            table.close()
            raise
        self.single_observation_space = spaces.Dict(
            {group.name: self._group_space(group) for group in table.groups}
        )
        self.single_action_space = spaces.Dict(
            {
                group.name: batch_space(group.action_space, len(group.agents))
                for group in table.groups
            }
        )
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._action_leaves = {
            group.name: space_leaves(group.action_space, ()) for group in table.groups
        }
        self._rewards = np.zeros(num_envs, np.float64)
        self._terminations = np.zeros(num_envs, np.bool_)
        self._truncations = np.zeros(num_envs, np.bool_)

    def _learn_action_masks(self) -> dict[str, np.ndarray]:
        """Per group whose agents' reset infos carry ``"action_mask"``, an array for the
        masks of shape ``(num_envs, n, *mask shape)`` (int8)."""
        _, infos = self.envs[0].reset()
        masks = {}
        for group in self.table.groups:
            shapes = {
                agent: np.shape(infos[agent]["action_mask"])
                for agent in group.agents
                if "action_mask" in infos.get(agent, {})
            }
            if not shapes:
                continue
            if len(set(shapes.values())) > 1:
                raise ValueError(
                    f"group {group.name!r}: expected its agents' action masks to share one "
                    f"shape, got {shapes}"
                )
            shape = next(iter(shapes.values()))
            masks[group.name] = np.zeros((len(self.envs), len(group.agents), *shape), np.int8)
        return masks

    def _group_space(self, group: AgentGroup) -> spaces.Dict:
        n = len(group.agents)
        entries: dict[str, spaces.Space] = {
            "observation": batch_space(group.observation_space, n),
            "mask": spaces.MultiBinary(n),
            "reward": spaces.Box(-np.inf, np.inf, (n,), np.float64),
            "terminated": spaces.MultiBinary(n),
            "truncated": spaces.MultiBinary(n),
        }
        if group.name in self._masks:
            entries["action_mask"] = spaces.MultiBinary(self._masks[group.name].shape[1:])
        return spaces.Dict(entries)

    # ---- gymnasium's VectorEnv ----------------------------------------------------------------
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env: each gets its live agents' actions."""
        self._check_open()
        group_actions = self._check_actions(actions)
        infos: dict[str, Any] = {}
        table = self.table
        for e in range(self.num_envs):
            if table.ended[e]:
                raise ValueError(
                    f"env {e} has no agent left: reset it first (options={{'reset_mask': ...}}) "
                    "before stepping it"
                )

        def action_of(e: int, agent: str) -> Any:
            group, j = table.slot[agent]
            return build_value(
                group.action_space,
                self._action_leaves[group.name],
                [array[e, j] for array in group_actions[group.name]],
            )

        for e in range(self.num_envs):
            _, rewards, terminations, _, env_infos = table.step_env(e, action_of)
            self._rewards[e] = sum(rewards.values())
            ended = bool(table.ended[e])
            terminated = ended and any(terminations.values())
            self._terminations[e], self._truncations[e] = terminated, ended and not terminated
            self._take_infos(infos, e, env_infos)
        return self._result(self._observations(), infos)

    # ---- the rows ---------------------------------------------------------------------------
    def _reset_env(
        self, infos: dict[str, Any], e: int, seed: int | None, options: dict | None
    ) -> None:
        self._rewards[e] = 0.0
        self._terminations[e] = self._truncations[e] = False
        self._take_infos(infos, e, self.table.reset_env(e, seed, options))

    def _check_actions(self, actions: Any) -> dict[str, list[np.ndarray]]:
        """Each group's action leaves, after checking their shapes."""
        if not isinstance(actions, dict) or set(actions) != set(self.groups):
            given = sorted(actions) if isinstance(actions, dict) else type(actions).__name__
            raise ValueError(
                f"actions: expected a dict with one entry per group {sorted(self.groups)}, "
                f"got {given}"
            )
        checked = {}
        for group in self.table.groups:
            arrays = []
            for leaf in self._action_leaves[group.name]:
                array = np.asarray(get_leaf(actions[group.name], leaf.path))
                expected = (self.num_envs, len(group.agents), *leaf.shape)
                if array.shape != expected:
                    raise ValueError(
                        f"actions[{group.name!r}]: expected an array of shape {expected} "
                        f"({self.num_envs} envs x agents {group.agents}, each an action of "
                        f"{group.action_space}), got shape {array.shape}"
                    )
                arrays.append(array)
            checked[group.name] = arrays
        return checked

    def _take_infos(self, infos: dict[str, Any], e: int, env_infos: dict[str, dict]) -> None:
        """Env ``e``'s action masks into their arrays; its agents' other infos into
        ``infos`` (gymnasium's vector info layout, by agent)."""
        table = self.table
        for masks in self._masks.values():
            masks[e] = 0
        others = {}
        for agent, info in env_infos.items():
            group, j = table.slot[agent]
            if group.name in self._masks and table.alive[e, table.index[agent]]:
                self._masks[group.name][e, j] = info.get("action_mask", 1)
            rest = {key: value for key, value in info.items() if key != "action_mask"}
            if rest:
                others[agent] = rest
        for name, masks in self._masks.items():  # present agents that reported no info
            for agent in self.groups[name]:
                if agent not in env_infos and table.alive[e, table.index[agent]]:
                    masks[e, table.slot[agent][1]] = 1
        if others:
            self._add_info(infos, others, e)

    def _observations(self) -> dict[str, dict[str, Any]]:
        table = self.table
        out = {}
        for group in table.groups:
            arrays = [array.copy() for array in group.obs] if self.copy else group.obs
            entries = {
                "observation": build_value(group.observation_space, group.leaves, arrays),
                "mask": table.alive[:, group.positions].astype(np.int8),
                "reward": table.rewards[:, group.positions],
                "terminated": table.terminated[:, group.positions].astype(np.int8),
                "truncated": table.truncated[:, group.positions].astype(np.int8),
            }
            if group.name in self._masks:
                entries["action_mask"] = self._masks[group.name].copy()
            out[group.name] = entries
        return out
