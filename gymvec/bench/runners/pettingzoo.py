"""PettingZoo bench cases: agent-steps/s of agents as rows (``python -m gymvec.bench --case
pz-simple-spread-8``), gymvec against SuperSuit and against plain loops.

A case's ``num_envs`` counts rows (agents x envs), so its steps/s are agent-steps/s. Runners:

* ``pz-supersuit``: SuperSuit's ``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), n,
  num_cpus=2, base_class="gymnasium")``, the field's usual way to train on agents as rows.
* ``pz-plain``: the same envs split over 2 plain ``multiprocessing`` processes, each stepping
  its envs with random actions when the parent posts a step; no observation crosses a process:
  the lock-step limit of any two-process vectorizer.
* ``pz-gymvec``: ``gymvec.pettingzoo.make_vec(env_fn, n, num_workers=2)``.
* ``pz-gym-sync``: gymnasium's ``SyncVectorEnv`` over the envs, each one gymnasium env of all
  its agents (:class:`AgentsEnv`), the case's ``x sync`` reference.
* ``pz-block``: one ``PettingZooBlock`` over all the envs in this process, and ``pz-loop``, the
  plain loop over the same envs in one process: what a block costs over stepping its envs.

Verdict: ``pz-gymvec`` against SyncVectorEnv, SuperSuit (target 1.5x) and ``pz-plain`` (target
0.9).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from gymvec.bench.runners.bare import fork_or_spawn
from gymvec.bench.runners.base import ACTION_SPACES, Runner, RunnerOptions, register_runner

SIMPLE_SPREAD_ID = "pettingzoo/simple_spread_v3"  # (the ids of bench.cases' pz-* cases)
PISTONBALL_ID = "pettingzoo/pistonball_v6"
PLAIN_PROCESSES = 2
_POOL = 64  # random actions drawn ahead per env, outside the timed loop


def simple_spread() -> Any:
    """mpe2's simple_spread_v3 as a parallel env (3 agents, 18 floats each)."""
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env()


def pistonball() -> Any:
    """pistonball_v6 as a parallel env (20 agents, 457x120x3 uint8 each)."""
    from pettingzoo.butterfly import pistonball_v6

    return pistonball_v6.parallel_env()


ENV_FNS: dict[str, Callable[[], Any]] = {SIMPLE_SPREAD_ID: simple_spread, PISTONBALL_ID: pistonball}
NUM_AGENTS = {SIMPLE_SPREAD_ID: 3, PISTONBALL_ID: 20}
ACTION_SPACES[SIMPLE_SPREAD_ID] = functools.partial(spaces.Discrete, 5)
ACTION_SPACES[PISTONBALL_ID] = functools.partial(spaces.Box, -1.0, 1.0, (1,), np.float32)


def _num_envs(env_id: str, rows: int) -> int:
    if env_id not in ENV_FNS:
        raise ValueError(f"env_id: expected one of {sorted(ENV_FNS)}, got {env_id!r}")
    return rows // NUM_AGENTS[env_id]


class VectorRunner(Runner):
    """A vector env of agent rows: SuperSuit's, gymvec's, or a block."""

    def __init__(self, venv: Any) -> None:
        self.venv = venv

    def reset(self, seed: int) -> None:
        self.venv.reset(seed=seed)

    def step(self, actions: Any) -> None:
        self.venv.step(actions)

    def close(self) -> None:
        self.venv.close()


class AgentsEnv(gym.Env):
    """A PettingZoo parallel env as one gymnasium env of all its agents: observations and
    actions stacked in ``possible_agents`` order, the agents' rewards summed (a gymnasium env
    has one reward), ended when no agent is left."""

    def __init__(self, env_fn: Callable[[], Any]) -> None:
        self.env = env_fn()
        self.agents = list(self.env.possible_agents)
        count = len(self.agents)
        self.observation_space = batch_space(self.env.observation_space(self.agents[0]), count)
        self.action_space = batch_space(self.env.action_space(self.agents[0]), count)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        observations, _ = self.env.reset(seed=seed, options=options)
        return np.stack([observations[a] for a in self.agents]), {}

    def step(self, action: Any) -> Any:
        actions = dict(zip(self.agents, action))
        if len(self.env.agents) < len(self.agents):
            actions = {a: actions[a] for a in self.env.agents}
        observations, rewards, terminations, truncations, _ = self.env.step(actions)
        obs = np.stack([observations[a] for a in self.agents])
        terminated = not self.env.agents and all(terminations.values())
        truncated = not self.env.agents and not terminated
        return obs, float(sum(rewards.values())), terminated, truncated, {}

    def close(self) -> None:
        self.env.close()


class SyncRunner(VectorRunner):
    """pz-gym-sync: the bench's batch of agent rows reshaped to one row of agents per env."""

    def prepare_actions(self, actions: Sequence[np.ndarray]) -> list[Any]:
        shape = self.venv.action_space.shape
        return [a.reshape(shape) for a in actions]


def _step_envs(envs: list, actions: Sequence[dict]) -> None:
    """One step of each env with its live agents' actions; an env with no agent left resets."""
    for env, env_actions in zip(envs, actions):
        if not env.agents:
            env.reset()
            continue
        env.step({agent: env_actions[agent] for agent in env.agents})


def _action_dicts(envs: list, seed: int) -> list[list[dict]]:
    """``_POOL`` rounds of random action dicts, one per env, drawn ahead."""
    for i, env in enumerate(envs):
        for k, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + 1000 * i + k)
    return [
        [{a: env.action_space(a).sample() for a in env.possible_agents} for env in envs]
        for _ in range(_POOL)
    ]


class LoopRunner(Runner):
    """pz-loop: the envs stepped in a plain loop in this process, with the bench's actions."""

    def __init__(self, env_fn: Callable[[], Any], num_envs: int) -> None:
        self.envs = [env_fn() for _ in range(num_envs)]
        self.agents = list(self.envs[0].possible_agents)

    def reset(self, seed: int) -> None:
        for e, env in enumerate(self.envs):
            env.reset(seed=seed + e)

    def prepare_actions(self, actions: Sequence[np.ndarray]) -> list[Any]:
        A = len(self.agents)
        return [
            [{a: rows[e * A + k] for k, a in enumerate(self.agents)} for e in range(len(self.envs))]
            for rows in actions
        ]

    def step(self, actions: Any) -> None:
        _step_envs(self.envs, actions)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _plain_worker(env_fn: Callable, num_envs: int, first: int, wake: Any, done: Any) -> None:
    """A pz-plain process: each command read from ``wake`` (a seed: reset; "step"; None: end)
    is a few bytes through a pipe, its end one semaphore release; no observation leaves."""
    envs = [env_fn() for _ in range(num_envs)]
    pool = _action_dicts(envs, first)
    i = 0
    while True:
        command = wake.recv()
        if command is None:
            break
        if isinstance(command, int):
            for e, env in enumerate(envs):
                env.reset(seed=command + first + e)
        else:
            _step_envs(envs, pool[i % _POOL])
            i += 1
        done.release()
    for env in envs:
        env.close()


class PlainRunner(Runner):
    """pz-plain: the envs split over plain processes; a step wakes each and waits for all."""

    def __init__(self, env_fn: Callable[[], Any], num_envs: int, processes: int) -> None:
        ctx = fork_or_spawn()
        self.processes: list[tuple[Any, Any, Any]] = []
        first = 0
        try:
            for p in range(processes):
                share = num_envs // processes + (p < num_envs % processes)
                parent, child = ctx.Pipe()
                done = ctx.Semaphore(0)
                process = ctx.Process(
                    target=_plain_worker, args=(env_fn, share, first, child, done), daemon=True
                )
                process.start()
                self.processes.append((process, parent, done))
                first += share
        except BaseException:
            self.close()
            raise

    def _post(self, command: Any) -> None:
        for _, pipe, _ in self.processes:
            pipe.send(command)
        for _, _, done in self.processes:
            done.acquire()

    def reset(self, seed: int) -> None:
        self._post(seed)

    def step(self, actions: Any) -> None:
        self._post("step")

    def close(self) -> None:
        for process, pipe, _ in self.processes:
            if process.is_alive():
                pipe.send(None)
            process.join(5)
            if process.is_alive():
                process.kill()
        self.processes = []


@register_runner("pz-supersuit")
def _pz_supersuit(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    import supersuit

    n = _num_envs(env_id, num_envs)
    venv = supersuit.pettingzoo_env_to_vec_env_v1(ENV_FNS[env_id]())
    cpus = options.num_workers or PLAIN_PROCESSES
    return VectorRunner(
        supersuit.concat_vec_envs_v1(venv, n, num_cpus=cpus, base_class="gymnasium")
    )


@register_runner("pz-gym-sync")
def _pz_gym_sync(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    env_fn = functools.partial(AgentsEnv, ENV_FNS[env_id])
    return SyncRunner(gym.vector.SyncVectorEnv([env_fn] * _num_envs(env_id, num_envs)))


@register_runner("pz-plain")
def _pz_plain(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    n = _num_envs(env_id, num_envs)
    return PlainRunner(ENV_FNS[env_id], n, options.num_workers or PLAIN_PROCESSES)


@register_runner("pz-gymvec")
def _pz_gymvec(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec.pettingzoo import make_vec

    n = _num_envs(env_id, num_envs)
    workers = options.num_workers or min(PLAIN_PROCESSES, os.cpu_count() or 1)
    return VectorRunner(make_vec(ENV_FNS[env_id], n, num_workers=workers))


@register_runner("pz-block")
def _pz_block(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec.pettingzoo import PettingZooBlock

    return VectorRunner(PettingZooBlock(ENV_FNS[env_id], _num_envs(env_id, num_envs)))


@register_runner("pz-loop")
def _pz_loop(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return LoopRunner(ENV_FNS[env_id], _num_envs(env_id, num_envs))
