"""``PettingZooBlock``: PettingZoo parallel envs as one gymnasium ``VectorEnv`` whose rows are
their agents, the block that gymvec's engine runs in a worker (see ``gymvec.pettingzoo``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate
from pettingzoo import ParallelEnv

from gymvec.common.structure import build_value, get_leaf, space_leaves
from gymvec.options import parse_autoreset_mode
from gymvec.pettingzoo.agents import check_parallel_env, close_env, common_spaces

_INTEGER_KINDS = {spaces.Discrete: "iu", spaces.MultiDiscrete: "iu", spaces.MultiBinary: "iub"}


class PettingZooBlock(VectorEnv):
    """``num_envs`` PettingZoo parallel envs as a vector env of ``num_envs * A`` rows, ``A =
    len(possible_agents)``: row ``e * A + k`` is agent ``possible_agents[k]`` of env ``e``.

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
        for name, value, least in (("num_envs", num_envs, 1), ("first_env", first_env, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name}: expected an int >= {least}, got {value!r}")
        mode = parse_autoreset_mode(autoreset_mode)
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
            obs_space, act_space = common_spaces(self.envs[0], self.agents)
        except BaseException:
            self._close_envs()
            raise
        self.first_env, self.copy = first_env, copy
        self.num_agents = len(self.agents)
        self.num_envs = num_envs * self.num_agents
        self.rows = [(first_env + e, agent) for e in range(num_envs) for agent in self.agents]
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(act_space, self.num_envs)
        self.metadata = {
            "autoreset_mode": mode,
            "render_modes": self.envs[0].metadata.get("render_modes", []),
        }
        self.render_mode = getattr(self.envs[0], "render_mode", None)
        self.closed = False
        self._index = {agent: k for k, agent in enumerate(self.agents)}
        self._leaves = space_leaves(obs_space, ())
        for leaf in self._leaves:
            if leaf.is_object:
                raise TypeError(
                    f"observation space {obs_space}: the leaf at {leaf.path} has no fixed shape "
                    "and dtype; gymvec.pettingzoo takes Box, Discrete, MultiDiscrete, "
                    "MultiBinary, and Dict and Tuple of them"
                )
        n = self.num_envs
        self._obs = [np.zeros((n, *leaf.shape), leaf.dtype) for leaf in self._leaves]
        self._rewards = np.zeros(n, np.float64)
        self._terminations = np.zeros(n, np.bool_)
        self._truncations = np.zeros(n, np.bool_)
        self._alive = np.zeros(n, np.bool_)
        self._ended = np.zeros(num_envs, np.bool_)  # no agent left: reset before stepping

    # ---- gymnasium's VectorEnv ----------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs (those whose rows ``options["reset_mask"]`` covers, or all)."""
        if isinstance(seed, int | np.integer):
            seed = int(seed)
            super().reset(seed=seed)  # the vector env's own np_random, as gymnasium's
        seeds = self._env_seeds(seed)
        # (the caller's dict is never mutated: gymnasium's vector envs pop "reset_mask")
        mask = options.get("reset_mask") if options else None
        env_options = None if options is None else {**options}
        if env_options is not None:
            env_options.pop("reset_mask", None)
        which = self._envs_of_mask(mask)
        infos: dict[str, Any] = {}
        for e in which:
            obs, env_infos = self.envs[e].reset(seed=seeds[e], options=env_options)
            self._take_reset(e, obs, env_infos, infos)
        infos["alive"] = self._alive.copy()
        return self._observations(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env: each gets its live agents' actions."""
        row_actions = self._check_actions(actions)
        mode = self.metadata["autoreset_mode"]
        A = self.num_agents
        infos: dict[str, Any] = {}
        for e, env in enumerate(self.envs):
            first = e * A
            if self._ended[e]:
                if mode != AutoresetMode.NEXT_STEP:
                    raise ValueError(
                        f"env {self.first_env + e} (rows {first}..{first + A - 1}) has no agent "
                        "left: reset it first (options={'reset_mask': ...}) before stepping it"
                    )
                obs, env_infos = env.reset()
                self._take_reset(e, obs, env_infos, infos)
                continue
            live = list(env.agents)
            step = env.step({a: row_actions[first + self._index[a]] for a in live})
            obs, rewards, terminations, truncations, env_infos = step
            self._clear(e, obs)
            for agent in live:
                self._alive[first + self._index[agent]] = True
            self._write_obs(first, obs)
            for agent, reward in rewards.items():
                self._rewards[first + self._index[agent]] = reward
            for agent, flag in terminations.items():
                self._terminations[first + self._index[agent]] = flag
            for agent, flag in truncations.items():
                self._truncations[first + self._index[agent]] = flag
            if mode == AutoresetMode.SAME_STEP:
                # each row that finished ends as a sub-env would: its last observation and
                # info in final_obs/final_info, its observation what the row holds next
                finished = self._final(first, terminations, truncations, env_infos, infos)
                if not env.agents:
                    obs, reset_infos = env.reset()
                    # the step's rewards and flags stay, and the agents that acted stay alive
                    self._take_reset(e, obs, reset_infos, infos, keep_results=True)
                    continue
                self._clear(e, set(obs) - finished, keep_results=True)
                env_infos = {a: info for a, info in env_infos.items() if a not in finished}
            for agent, info in env_infos.items():
                self._add_info(infos, info, first + self._index[agent])
            if not env.agents:
                self._ended[e] = True
        infos["alive"] = self._alive.copy()
        return (
            self._observations(),
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name`` (called if callable), once per row, as ``SyncVectorEnv.call``
        gives one result per sub-env."""
        results = []
        for env in self.envs:
            value = getattr(env, name)
            results.append(value(*args, **kwargs) if callable(value) else value)
        return tuple(result for result in results for _ in self.agents)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name``, once per row."""
        return tuple(getattr(env, name) for env in self.envs for _ in self.agents)

    def render(self) -> tuple[Any, ...]:
        """Each env's ``render()``."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        self._close_envs()

    # ---- helpers ------------------------------------------------------------------------------
    def _close_envs(self) -> None:
        for env in self.envs:
            close_env(env)

    def _env_seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        n = len(self.envs)
        if seed is None:
            return [None] * n
        if isinstance(seed, int):
            base = seed - self.first_env * (self.num_agents - 1)
            return [base + j for j in range(n)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"seed: expected an int, None or a list of {self.num_envs} seeds (one per row), "
                f"got a list of {len(seeds)}"
            )
        return seeds[:: self.num_agents]

    def _envs_of_mask(self, mask: Any) -> list[int]:
        """The envs whose rows a reset mask covers (all without one)."""
        if mask is None:
            return list(range(len(self.envs)))
        mask = np.asarray(mask)
        if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
            raise ValueError(
                f"options['reset_mask']: expected a bool array of shape ({self.num_envs},), got "
                f"{mask.dtype} of shape {mask.shape}"
            )
        per_env = mask.reshape(len(self.envs), self.num_agents)
        split = np.flatnonzero(per_env.any(axis=1) & ~per_env.all(axis=1))
        if split.size:
            e = int(split[0])
            raise ValueError(
                f"options['reset_mask']: expected whole envs (all {self.num_agents} rows of an "
                f"env or none), got rows {per_env[e].tolist()} for env {self.first_env + e} "
                f"(rows {e * self.num_agents}..{(e + 1) * self.num_agents - 1})"
            )
        return [int(e) for e in np.flatnonzero(per_env[:, 0])]

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

    def _clear(self, e: int, observed: Iterable[str], keep_results: bool = False) -> None:
        """Env ``e``'s rows as not alive: a zero observation for the agents not in
        ``observed`` (whose rows are about to be written: not zeroed first, which would double
        the copying of image observations), and, unless ``keep_results``, reward 0 and flags
        False."""
        first = e * self.num_agents
        rows = slice(first, first + self.num_agents)
        observed = set(observed)
        for k, agent in enumerate(self.agents):
            if agent not in observed:
                for array in self._obs:
                    array[first + k] = 0
        if keep_results:
            return
        self._rewards[rows] = 0.0
        self._terminations[rows] = False
        self._truncations[rows] = False
        self._alive[rows] = False

    def _write_obs(self, first: int, obs: dict[str, Any]) -> None:
        for agent, value in obs.items():
            row = first + self._index[agent]
            for leaf, array in zip(self._leaves, self._obs):
                array[row] = get_leaf(value, leaf.path)

    def _take_reset(
        self, e: int, obs: dict, env_infos: dict, infos: dict[str, Any], keep_results: bool = False
    ) -> None:
        """Env ``e`` was reset: its rows hold the reset observations of the agents present
        (and, with ``keep_results``, the rewards, flags and alive rows of the step before)."""
        first = e * self.num_agents
        self._clear(e, obs, keep_results)
        self._ended[e] = False
        for agent in self.envs[e].agents:
            self._alive[first + self._index[agent]] = True
        self._write_obs(first, obs)
        for agent, info in env_infos.items():
            self._add_info(infos, info, first + self._index[agent])

    def _final(
        self, first: int, terminations: dict, truncations: dict, env_infos: dict, infos: dict
    ) -> set[str]:
        """``final_obs``/``final_info`` (gymnasium's SAME_STEP layout) for the rows whose
        agent finished in this step; returns those agents."""
        agents = terminations.keys() | truncations.keys()
        finished = {a for a in agents if terminations.get(a) or truncations.get(a)}
        for agent in finished:
            row = first + self._index[agent]
            final_obs = build_value(
                self.single_observation_space,
                self._leaves,
                [array[row].copy() for array in self._obs],
            )
            self._add_info(
                infos, {"final_obs": final_obs, "final_info": env_infos.get(agent, {})}, row
            )
        return finished

    def _observations(self) -> Any:
        arrays = [array.copy() for array in self._obs] if self.copy else self._obs
        return build_value(self.single_observation_space, self._leaves, arrays)
