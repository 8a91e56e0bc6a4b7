"""Ray runners for the bench: gymvec's ``RayEnv`` (through ``make_vec(backend="ray")``) against
the two ways a user would otherwise spread envs over Ray actors.

* ``gymvec-ray``: ``make_vec(..., backend="ray", num_workers=W)``, one actor per worker.
* ``hand-ray``: W actors, each holding a gymnasium ``SyncVectorEnv`` of its share; one remote
  call per actor per step, results concatenated.
* ``hand-ray-dag``: the same actors driven through a Ray Compiled Graph (``ray.dag``,
  ``experimental_compile``): what compiled graphs save on the per-call cost.
* ``naive-ray``: one actor per env, one remote call per env per step.

Ray starts here when it is not running yet: a local instance on 127.0.0.1 only (see
:func:`ensure_ray`), without the dashboard or usage stats.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gymvec.bench.runners import Runner, RunnerOptions, VectorEnvRunner, make_env, worker_layout
from gymvec.bench.runners import register_runner as _register


def ensure_ray() -> Any:
    """Ray, started locally on the loopback address if this process has not started it."""
    # Read by Ray when it is imported: every Ray process then binds 127.0.0.1 only.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from gymvec.backends.ray.executor import import_ray

    ray = import_ray()
    if not ray.is_initialized():
        ray.init(
            include_dashboard=False,
            object_store_memory=200 * 2**20,
            log_to_driver=False,
        )
    return ray


class ShareOfEnvs:
    """A hand-written Ray actor: a gymnasium ``SyncVectorEnv`` of its share of the envs."""

    def __init__(self, env_id: str, num_envs: int):
        import functools

        import gymnasium as gym

        self.envs = gym.vector.SyncVectorEnv([functools.partial(make_env, env_id)] * num_envs)

    def reset(self, seed: int) -> Any:
        return self.envs.reset(seed=seed)[0]

    def step(self, actions: np.ndarray) -> tuple:
        return self.envs.step(actions)

    def ready(self) -> bool:
        return True


class OneEnv:
    """A naive Ray actor: one gymnasium env, reset when its episode ends."""

    def __init__(self, env_id: str):
        self.env = make_env(env_id)

    def reset(self, seed: int) -> Any:
        return self.env.reset(seed=seed)[0]

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            obs, info = self.env.reset()
        return obs, reward, terminated, truncated, info

    def ready(self) -> bool:
        return True


class HandRayRunner(Runner):
    """Actors each holding a share of the envs; one plain call (or one compiled-graph
    execution for all of them) per step."""

    def __init__(self, env_id: str, num_envs: int, num_workers: int, compiled: bool) -> None:
        ray = self.ray = ensure_ray()
        actor_class = ray.remote(num_cpus=0)(ShareOfEnvs)
        size = num_envs // num_workers
        self.bounds = [(w * size, (w + 1) * size) for w in range(num_workers)]
        self.actors = [actor_class.remote(env_id, size) for _ in range(num_workers)]
        ray.get([actor.ready.remote() for actor in self.actors])
        self.compiled = compiled
        self.dag = None

    def reset(self, seed: int) -> None:
        refs = [a.reset.remote(seed + s) for a, (s, _) in zip(self.actors, self.bounds)]
        self.ray.get(refs)
        if self.compiled and self.dag is None:  # compiled once the envs are reset
            from ray.dag import InputNode, MultiOutputNode

            with InputNode() as inputs:
                outputs = [actor.step.bind(inputs[w]) for w, actor in enumerate(self.actors)]
                self.dag = MultiOutputNode(outputs).experimental_compile()

    def step(self, actions: Any) -> None:
        shares = [actions[start:stop] for start, stop in self.bounds]
        if self.dag is not None:
            results = self.ray.get(self.dag.execute(*shares))
        else:
            refs = [actor.step.remote(share) for actor, share in zip(self.actors, shares)]
            results = self.ray.get(refs)
        # what the caller needs: the batch's arrays in one piece
        for k in range(4):
            np.concatenate([result[k] for result in results])

    def close(self) -> None:
        if self.dag is not None:
            self.dag.teardown()
        for actor in self.actors:
            self.ray.kill(actor)


class NaiveRayRunner(Runner):
    """One actor per env, one call per env per step."""

    def __init__(self, env_id: str, num_envs: int) -> None:
        ray = self.ray = ensure_ray()
        actor_class = ray.remote(num_cpus=0)(OneEnv)
        self.actors = [actor_class.remote(env_id) for _ in range(num_envs)]
        ray.get([actor.ready.remote() for actor in self.actors])

    def reset(self, seed: int) -> None:
        self.ray.get([actor.reset.remote(seed + i) for i, actor in enumerate(self.actors)])

    def step(self, actions: Any) -> None:
        refs = [actor.step.remote(action) for actor, action in zip(self.actors, actions)]
        results = self.ray.get(refs)
        np.stack([result[0] for result in results])

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)


@_register("gymvec-ray")
def _gymvec_ray(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec.integrations.make_vec import make_vec

    ensure_ray()
    num_workers, _ = worker_layout(num_envs, options)
    envs = make_vec(
        env_id,
        num_envs,
        backend="ray",
        num_workers=num_workers,
        ray_options={"actor_options": {"num_cpus": 0}, "placement": None},
    )
    return VectorEnvRunner(envs)


@_register("hand-ray")
def _hand_ray(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    num_workers, _ = worker_layout(num_envs, options)
    return HandRayRunner(env_id, num_envs, num_workers, compiled=False)


@_register("hand-ray-dag")
def _hand_ray_dag(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    num_workers, _ = worker_layout(num_envs, options)
    return HandRayRunner(env_id, num_envs, num_workers, compiled=True)


@_register("naive-ray")
def _naive_ray(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return NaiveRayRunner(env_id, num_envs)
