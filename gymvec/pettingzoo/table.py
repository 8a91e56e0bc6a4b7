"""``AgentTable``: PettingZoo parallel envs and their agents' latest results, in arrays laid
out per group of agents. What both blocks of ``gymvec.pettingzoo`` step:
:class:`~gymvec.pettingzoo.AgentRowsBlock` (agents as rows: one group of all agents) and
:class:`~gymvec.pettingzoo.EnvRowsBlock` (envs as rows: agents in groups)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from gymvec.common.structure import Leaf, get_leaf, space_leaves
from gymvec.pettingzoo.agents import check_parallel_env, close_env, common_spaces


@dataclasses.dataclass
class AgentGroup:
    """Agents that share their spaces; ``obs[i]`` holds leaf ``leaves[i]`` of each agent's
    observation, shaped ``(num_envs, len(agents), *leaf shape)``; ``positions`` are the
    agents' indices in ``possible_agents``."""

    name: str
    agents: list[str]
    positions: np.ndarray
    observation_space: spaces.Space
    action_space: spaces.Space
    leaves: list[Leaf]
    obs: list[np.ndarray]


class AgentTable:
    """``num_envs`` PettingZoo parallel envs (``env_fn()`` each) and what their agents last
    reported: observations per group (:class:`AgentGroup`), and per env and agent (in
    ``possible_agents`` order, arrays of shape ``(num_envs, A)``) reward, ``terminated``,
    ``truncated`` and ``alive`` (the agent acted in the last step, or is present after a
    reset). An agent that did not report holds a zero observation, reward 0 and both flags
    False. ``ended[e]``: env ``e`` has no agent left.

    Args:
        env_fn: builds one PettingZoo ``ParallelEnv``.
        num_envs: how many envs.
        groups: group name -> agents (every possible agent in exactly one group, agents of a
            group sharing their spaces); None: one group ``""`` of all agents.
    """

    def __init__(
        self,
        env_fn: Callable[[], ParallelEnv],
        num_envs: int,
        groups: dict[str, list[str]] | None = None,
    ):
        self.envs: list[ParallelEnv] = []
        try:
            for _ in range(num_envs):
                self.envs.append(env_fn())
                check_parallel_env(self.envs[-1])
            self.agents: list[str] = list(self.envs[0].possible_agents)
            for env in self.envs[1:]:
                if list(env.possible_agents) != self.agents:
                    raise ValueError(
                        f"env_fn(): expected every env to have possible_agents {self.agents}, "
                        f"got {list(env.possible_agents)}"
                    )
            self.index = {agent: k for k, agent in enumerate(self.agents)}
            groups = {"": self.agents} if groups is None else check_groups(groups, self.agents)
            self.groups = [self._group(name, agents, num_envs) for name, agents in groups.items()]
        except BaseException:
            self.close()
            raise
        self.slot = {a: (g, j) for g in self.groups for j, a in enumerate(g.agents)}
        shape = (num_envs, len(self.agents))
        self.rewards = np.zeros(shape, np.float64)
        self.terminated = np.zeros(shape, np.bool_)
        self.truncated = np.zeros(shape, np.bool_)
        self.alive = np.zeros(shape, np.bool_)
        self.ended = np.zeros(num_envs, np.bool_)

    def _group(self, name: str, agents: list[str], num_envs: int) -> AgentGroup:
        obs_space, act_space = common_spaces(self.envs[0], agents)
        leaves = space_leaves(obs_space, ())
        for leaf in leaves:
            if leaf.is_object:
                raise TypeError(
                    f"observation space {obs_space}: the leaf at {leaf.path} has no fixed shape "
                    "and dtype; gymvec.pettingzoo takes Box, Discrete, MultiDiscrete, "
                    "MultiBinary, and Dict and Tuple of them"
                )
        n = len(agents)
        return AgentGroup(
            name,
            list(agents),
            np.array([self.index[a] for a in agents], np.intp),
            obs_space,
            act_space,
            leaves,
            [np.zeros((num_envs, n, *leaf.shape), leaf.dtype) for leaf in leaves],
        )

    def close(self) -> None:
        for env in self.envs:
            close_env(env)

    # ---- stepping -----------------------------------------------------------------------------
    def reset_env(
        self, e: int, seed: int | None, options: dict | None, keep_results: bool = False
    ) -> dict[str, dict]:
        """Reset env ``e``: its agents present hold their reset observations and are alive
        (with ``keep_results``, the rewards, flags and alive agents of the step before stay).
        Returns the agents' infos."""
        env = self.envs[e]
        obs, infos = env.reset(seed=seed, options=options)
        self.clear(e, obs, keep_results)
        self.ended[e] = False
        for agent in env.agents:
            self.alive[e, self.index[agent]] = True
        self.write_obs(e, obs)
        return infos

    def step_env(
        self, e: int, action_of: Callable[[int, str], Any]
    ) -> tuple[dict, dict, dict, dict, dict]:
        """Step env ``e`` with ``action_of(e, agent)`` for each live agent and record what it
        returns (returned too, as PettingZoo's dicts)."""
        env = self.envs[e]
        live = list(env.agents)
        obs, rewards, terminations, truncations, infos = env.step(
            {a: action_of(e, a) for a in live}
        )
        self.clear(e, obs)
        for agent in live:
            self.alive[e, self.index[agent]] = True
        self.write_obs(e, obs)
        for values, table in (
            (rewards, self.rewards),
            (terminations, self.terminated),
            (truncations, self.truncated),
        ):
            for agent, value in values.items():
                table[e, self.index[agent]] = value
        self.ended[e] = not env.agents
        return obs, rewards, terminations, truncations, infos

    def clear(self, e: int, observed: Iterable[str], keep_results: bool = False) -> None:
        """Env ``e``'s agents as not alive: a zero observation for the agents not in
        ``observed`` (those about to be written are not zeroed first, which would double the
        copying of image observations), and, unless ``keep_results``, reward 0 and flags
        False."""
        observed = set(observed)
        for agent, (group, j) in self.slot.items():
            if agent not in observed:
                for array in group.obs:
                    array[e, j] = 0
        if keep_results:
            return
        self.rewards[e] = 0.0
        self.terminated[e] = False
        self.truncated[e] = False
        self.alive[e] = False

    def write_obs(self, e: int, obs: dict[str, Any]) -> None:
        for agent, value in obs.items():
            group, j = self.slot[agent]
            for leaf, array in zip(group.leaves, group.obs):
                array[e, j] = get_leaf(value, leaf.path)

    def agent_obs(self, e: int, agent: str) -> list[np.ndarray]:
        """Copies of the leaves of what ``agent`` of env ``e`` holds now."""
        group, j = self.slot[agent]
        return [array[e, j].copy() for array in group.obs]


def check_groups(
    groups: Mapping[str, Sequence[str]], agents: Sequence[str]
) -> dict[str, list[str]]:
    """``groups`` (name -> agents) as lists, after checking that every agent of ``agents`` is
    in exactly one group and that groups name only those agents; a ValueError naming the
    agents otherwise."""
    if not isinstance(groups, dict) or not groups:
        raise ValueError(f"group_map: expected a non-empty dict of name -> agents, got {groups!r}")
    seen: dict[str, str] = {}
    for name, members in groups.items():
        if not isinstance(name, str) or isinstance(members, str) or not list(members):
            raise ValueError(
                f"group_map: expected str names and non-empty lists of agents, got {name!r}: "
                f"{members!r}"
            )
        for agent in members:
            if agent in seen:
                raise ValueError(
                    f"group_map: agent {agent!r} is in two groups ({seen[agent]!r} and {name!r}); "
                    "expected every agent in exactly one group"
                )
            seen[agent] = name
    unknown = [agent for agent in seen if agent not in agents]
    missing = [agent for agent in agents if agent not in seen]
    if unknown or missing:
        raise ValueError(
            f"group_map: expected every agent of possible_agents {list(agents)} in exactly one "
            f"group; missing {missing}, unknown {unknown}"
        )
    return {name: list(members) for name, members in groups.items()}
