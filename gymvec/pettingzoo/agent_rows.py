"""``AgentRowsBlock`` (also ``PettingZooBlock``): PettingZoo parallel envs as one gymnasium
``VectorEnv`` whose rows are their agents, the block that gymvec's engine runs in a worker under
:func:`gymvec.pettingzoo.make_vec`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate
from pettingzoo import ParallelEnv

from gymvec.common.structure import build_value
from gymvec.options import parse_autoreset_mode
from gymvec.pettingzoo.table import AgentTable
from gymvec.pettingzoo.table_block import TableBlock, check_counts

_INTEGER_KINDS = {spaces.Discrete: "iu", spaces.MultiDiscrete: "iu", spaces.MultiBinary: "iub"}


class AgentRowsBlock(TableBlock):
    """PettingZoo parallel envs as one vector env whose rows are their agents, a row each.

    ``num_envs * A`` rows, ``A = len(possible_agents)``: row ``e * A + k`` is agent
    ``possible_agents[k]`` of env ``e``.

    The rows share the agents' common observation and action spaces. Each step hands every
    env a dict of the actions of its live agents (``env.agents``); the other rows' actions are
    ignored. A row whose agent is not alive (it left, or has not appeared yet) holds a zero
    observation, reward 0 and both flags False. ``infos["alive"]`` says, per row, whether its
    agent acted in this call, or, for an env reset in this call, whether it is present; other
    per-agent infos (``"action_mask"`` among them) follow gymnasium's vector info layout over
    the rows. An env ends when no agent is left, and then autoresets all its rows at once by
    ``autoreset_mode``. With ``"same_step"``, each row whose agent finished in a step has its
    last observation and info in ``final_obs``/``final_info``, and its observation is what the
    row holds next: zero where its env goes on, the reset observation where the env reset.
    With ``"disabled"``, ``reset(options={"reset_mask": m})`` resets the
    envs whose rows ``m`` covers (a mask that splits an env is a ValueError).

    Seeds: ``reset(seed=t)`` gives env ``first_env + j`` the seed ``t - first_env * (A - 1) +
    j``. ``t`` is the seed of the block's first row, row ``first_env * A`` of a vector env
    seeded ``s`` (rows are seeded ``s + row``), so env ``e`` of that vector env gets ``s + e``
    wherever its block starts; a lone block (``first_env=0``) gives env ``j`` the seed ``t +
    j``. A list of per-row seeds seeds each env with its first row's.

    Args:
        env_fn: builds one PettingZoo ``ParallelEnv``.
        num_envs: how many envs (the block has ``num_envs * A`` rows: ``self.num_envs``).
        autoreset_mode: "next_step", "same_step" or "disabled" (or an ``AutoresetMode``).
        first_env: the index of this block's first env in the whole vector env.
        copy: return copies of the observation arrays (False: arrays reused by the next call).
    """

    def __init__(
        self,
        env_fn: Callable[[], ParallelEnv],
        num_envs: int = 1,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        first_env: int = 0,
        copy: bool = True,
    ):
        check_counts(num_envs=(num_envs, 1), first_env=(first_env, 0))
        mode = parse_autoreset_mode(autoreset_mode)
        table = AgentTable(env_fn, num_envs)
        super().__init__(
            table,
            rows_per_env=len(table.agents),
            autoreset_mode=mode,
            first_env=first_env,
            copy=copy,
        )
        (group,) = table.groups
        obs_space, act_space = group.observation_space, group.action_space
        self.num_agents = len(self.agents)
        self.rows = [(first_env + e, agent) for e in range(num_envs) for agent in self.agents]
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(act_space, self.num_envs)
        self._index = table.index
        self._leaves = group.leaves
        n = self.num_envs
        # the table's arrays seen as rows (views: (num_envs, A, ...) -> (num_envs * A, ...))
        self._obs = [array.reshape(n, *array.shape[2:]) for array in group.obs]
        self._rewards = table.rewards.reshape(n)
        self._terminations = table.terminated.reshape(n)
        self._truncations = table.truncated.reshape(n)
        self._alive = table.alive.reshape(n)
        # step_into's condition: the observations are one array (no Dict or Tuple leaves)
        self.writes_into = [leaf.path for leaf in self._leaves] == [()]

    # ---- gymnasium's VectorEnv ----------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs (those whose rows ``options["reset_mask"]`` covers, or all);
        ``infos["alive"]`` says which rows' agents are present."""
        obs, infos = super().reset(seed=seed, options=options)
        infos["alive"] = self._alive.copy()
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env: each gets its live agents' actions."""
        infos = self._step(actions)
        return self._result(self._observations(), infos)

    def step_into(
        self, actions: Any, out: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """``step``, the agents' observations written straight into ``out`` (C-ordered, of
        the batched observation space's shape), which comes back as the observations: gymvec
        hands its shared memory's rows, and the images skip a copy. For an observation space
        of one array (see ``writes_into``); ``out`` is not kept past the call. A later
        ``step`` writes every row again, but a ``reset`` with a ``reset_mask`` returns, for
        the rows it leaves alone, what they held before this call (gymvec reads only the
        rows it reset)."""
        if not self.writes_into:
            raise TypeError(f"step_into: needs one array observation, not {self._leaves}")
        group = self.table.groups[0]
        own = group.obs
        group.obs = [out.reshape(len(self.envs), self.num_agents, *out.shape[1:])]
        try:
            infos = self._step(actions)
        finally:
            group.obs = own
        return self._result(out, infos)

    def _step(self, actions: Any) -> dict[str, Any]:
        """Step every env, its results in the table; returns the infos."""
        self._check_open()
        row_actions = self._check_actions(actions)
        mode = self.metadata["autoreset_mode"]
        A = self.num_agents
        infos: dict[str, Any] = {}
        table = self.table
        for e in range(len(self.envs)):
            first = e * A
            if table.ended[e]:
                if mode != AutoresetMode.NEXT_STEP:
                    raise ValueError(
                        f"env {self.first_env + e} (rows {first}..{first + A - 1}) has no agent "
                        "left: reset it first (options={'reset_mask': ...}) before stepping it"
                    )
                self._reset_env(infos, e, None, None)
                continue
            step = table.step_env(e, lambda env, agent: row_actions[env * A + self._index[agent]])
            obs, _, terminations, truncations, env_infos = step
            if mode == AutoresetMode.SAME_STEP:
                # each row that finished ends as a sub-env would: its last observation and
                # info in final_obs/final_info, its observation what the row holds next
                finished = self._final(e, terminations, truncations, env_infos, infos)
                if table.ended[e]:
                    # the step's rewards and flags stay, and the agents that acted stay alive
                    reset_infos = table.reset_env(e, None, None, keep_results=True)
                    self._add_infos(infos, e, reset_infos)
                    continue
                table.clear(e, set(obs) - finished, keep_results=True)
                env_infos = {a: info for a, info in env_infos.items() if a not in finished}
            self._add_infos(infos, e, env_infos)
        infos["alive"] = self._alive.copy()
        return infos

    # ---- the rows ---------------------------------------------------------------------------
    def _reset_env(
        self, infos: dict[str, Any], e: int, seed: int | None, options: dict | None
    ) -> None:
        self._add_infos(infos, e, self.table.reset_env(e, seed, options))

    def _check_actions(self, actions: Any) -> list[Any]:
        """One action per row, after checking the batch's shape and dtype."""
        space = self.single_action_space
        if isinstance(
            space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary
        ):
            array = np.asarray(actions)
            expected = (self.num_envs, *(space.shape or ()))
            kinds = _INTEGER_KINDS.get(type(space), "fiu")
            if array.shape != expected or array.dtype.kind not in kinds:
                raise ValueError(
                    f"actions: expected an array of shape {expected} ({len(self.envs)} envs x "
                    f"{self.num_agents} agents, each an action of {space}) and a "
                    f"{'integer' if kinds != 'fiu' else 'numeric'} dtype, got {array.dtype} of "
                    f"shape {array.shape}"
                )
            return list(array)
        return list(iterate(self.action_space, actions))

    def _add_infos(self, infos: dict[str, Any], e: int, env_infos: dict[str, dict]) -> None:
        """Env ``e``'s agents' infos into gymnasium's vector info layout over the rows."""
        for agent, info in env_infos.items():
            self._add_info(infos, info, e * self.num_agents + self._index[agent])

    def _final(
        self, e: int, terminations: dict, truncations: dict, env_infos: dict, infos: dict
    ) -> set[str]:
        """``final_obs``/``final_info`` (gymnasium's SAME_STEP layout) for the rows whose
        agent finished in this step; returns those agents."""
        agents = terminations.keys() | truncations.keys()
        finished = {a for a in agents if terminations.get(a) or truncations.get(a)}
        for agent in finished:
            row = e * self.num_agents + self._index[agent]
            final_obs = build_value(
                self.single_observation_space, self._leaves, self.table.agent_obs(e, agent)
            )
            self._add_info(
                infos, {"final_obs": final_obs, "final_info": env_infos.get(agent, {})}, row
            )
        return finished

    def _observations(self) -> Any:
        arrays = [array.copy() for array in self._obs] if self.copy else self._obs
        return build_value(self.single_observation_space, self._leaves, arrays)
