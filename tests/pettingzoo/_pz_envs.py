"""Hand-written PettingZoo parallel envs for gymvec.pettingzoo's tests, and a reference that
steps PettingZoo envs one by one and lays their agents out as rows."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class LeavingEnv(ParallelEnv):
    """Three agents that leave at seeded, different steps: ``a_0`` and ``a_1`` terminate,
    ``a_2`` truncates. Observations say the step, the agent and the last action; infos carry an
    ``"action_mask"`` and the step. The env refuses an action for an agent that is not live."""

    metadata = {"name": "leaving_v0", "render_modes": []}

    def __init__(self, max_len: int = 5):
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self.max_len = max_len
        self.agents: list[str] = []
        self._rng = np.random.default_rng()

    def observation_space(self, agent):
        return spaces.Box(-100.0, 100.0, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self, agent: str, action: int) -> np.ndarray:
        k = self.possible_agents.index(agent)
        return np.array([self.t, k + self.offset, action], np.float32)

    def _info(self, agent: str) -> dict:
        mask = np.ones(3, np.int8)
        mask[(self.t + self.possible_agents.index(agent)) % 3] = 0
        return {"action_mask": mask, "t": self.t}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        self.offset = float(self._rng.integers(0, 50))
        self.lengths = dict(zip(self.possible_agents, self._rng.integers(1, self.max_len, 3)))
        self.agents = list(self.possible_agents)
        return {a: self._obs(a, -1) for a in self.agents}, {a: self._info(a) for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise ValueError(f"actions for {sorted(actions)}, live agents {self.agents}")
        self.t += 1
        obs = {a: self._obs(a, int(actions[a])) for a in self.agents}
        rewards = {a: float(actions[a]) + 0.5 * self.t for a in self.agents}
        leaving = {a: self.t >= self.lengths[a] for a in self.agents}
        terms = {a: leaving[a] and a != "a_2" for a in self.agents}
        truncs = {a: leaving[a] and a == "a_2" for a in self.agents}
        infos = {a: self._info(a) for a in self.agents}
        self.agents = [a for a in self.agents if not leaving[a]]
        return obs, rewards, terms, truncs, infos


class LateEnv(ParallelEnv):
    """``p_1`` appears after the second step; everyone leaves at step 5. Dict observations
    carry an ``"action_mask"`` (which stays in the observation)."""

    metadata = {"name": "late_v0", "render_modes": []}

    def __init__(self):
        self.possible_agents = ["p_0", "p_1"]
        self.agents: list[str] = []

    def observation_space(self, agent):
        return spaces.Dict(
            {
                "action_mask": spaces.MultiBinary(2),
                "position": spaces.Box(-1e3, 1e3, (2,), np.float64),
            }
        )

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self, agent):
        k = self.possible_agents.index(agent)
        mask = np.array([1, (self.t + k) % 2], np.int8)
        return {"action_mask": mask, "position": np.array([self.t, k + self.seed0], np.float64)}

    def reset(self, seed=None, options=None):
        self.seed0 = -1.0 if seed is None else float(seed)
        self.t = 0
        self.agents = ["p_0"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise ValueError(f"actions for {sorted(actions)}, live agents {self.agents}")
        self.t += 1
        if self.t == 2:
            self.agents = ["p_0", "p_1"]
        done = self.t >= 5
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(actions.get(a, 0)) for a in self.agents}
        terms = {a: done for a in self.agents}
        truncs = {a: False for a in self.agents}
        infos = {a: {"score": self.t * 10} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


class MixedSpacesEnv(ParallelEnv):
    """Two agents whose observation spaces differ (as mpe2's simple_tag)."""

    metadata = {"name": "mixed_v0", "render_modes": []}

    def __init__(self):
        self.possible_agents = ["hunter_0", "prey_0"]
        self.agents: list[str] = []

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (4 if agent.startswith("hunter") else 3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: self.observation_space(a).sample() for a in self.agents}, {}

    def step(self, actions):
        raise NotImplementedError


class CrashingEnv(LeavingEnv):
    """A LeavingEnv whose second step raises."""

    def step(self, actions):
        if self.t >= 1:
            raise RuntimeError("CrashingEnv: boom")
        return super().step(actions)


def leaving_env() -> LeavingEnv:
    return LeavingEnv()


def late_env() -> LateEnv:
    return LateEnv()


def crashing_env() -> CrashingEnv:
    return CrashingEnv()


def simple_spread(max_cycles: int = 6):
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=max_cycles)


def knights_archers_zombies():
    from pettingzoo.butterfly import knights_archers_zombies_v11

    return knights_archers_zombies_v11.parallel_env(max_cycles=60)


class Reference:
    """PettingZoo envs stepped one by one, their agents laid out as rows with NEXT_STEP
    autoreset: what gymvec.pettingzoo's rows must equal."""

    def __init__(self, env_fn, num_envs: int):
        self.envs = [env_fn() for _ in range(num_envs)]
        self.agents = list(self.envs[0].possible_agents)
        self.ended = [False] * num_envs

    def _rows(self, e, obs, rewards=None, terms=None, truncs=None, acted=()):
        return [
            {
                "row": e * len(self.agents) + k,
                "obs": obs.get(agent),
                "reward": (rewards or {}).get(agent, 0.0),
                "terminated": bool((terms or {}).get(agent, False)),
                "truncated": bool((truncs or {}).get(agent, False)),
                "alive": agent in acted,
            }
            for k, agent in enumerate(self.agents)
        ]

    def reset(self, seed: int) -> list[dict]:
        rows = []
        for e, env in enumerate(self.envs):
            obs, _ = env.reset(seed=seed + e)
            self.ended[e] = False
            rows += self._rows(e, obs, acted=env.agents)
        return rows

    def step(self, row_actions) -> list[dict]:
        rows = []
        A = len(self.agents)
        for e, env in enumerate(self.envs):
            if self.ended[e]:
                obs, _ = env.reset()
                self.ended[e] = False
                rows += self._rows(e, obs, acted=env.agents)
                continue
            live = list(env.agents)
            acts = {a: row_actions[e * A + self.agents.index(a)] for a in live}
            obs, rewards, terms, truncs, _ = env.step(acts)
            self.ended[e] = not env.agents
            rows += self._rows(e, obs, rewards, terms, truncs, acted=live)
        return rows

    def close(self) -> None:
        for env in self.envs:
            env.close()
