"""Runners: the vectorizers the bench compares, each behind one small interface.

A runner factory takes ``(env_id, num_envs, options)`` and returns a :class:`Runner`. Register
a new one with::

    @register_runner("my-runner")
    def _my_runner(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
        return VectorEnvRunner(MyVectorEnv(make_env_fns(env_id, num_envs)))

Imports of optional or not-yet-built packages happen inside the factories, so a missing one
only fails that runner.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from gymvec.bench.envs import importable_id
from gymvec.common.cores import usable_cores


@dataclass(frozen=True)
class RunnerOptions:
    """Layout hints for runners with worker processes; runners that have none ignore them."""

    num_workers: int | None = None
    envs_per_worker: int | None = None


class Runner:
    """What the bench times: ``reset`` once, then ``step`` over and over, then ``close``.

    ``prepare_actions`` turns the bench's pool of batched numpy actions into whatever ``step``
    takes; it runs outside the timed loop. ``env_steps``: the env-steps one ``step`` makes
    (None: every sub-env's, lock-step; a first-ready runner makes ``batch_size``, a
    collector's batch ``frames_per_batch``).
    """

    env_steps: int | None = None

    def reset(self, seed: int) -> None:
        raise NotImplementedError

    def step(self, actions: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def prepare_actions(self, actions: Sequence[np.ndarray]) -> list[Any]:
        return list(actions)


RunnerFactory = Callable[[str, int, RunnerOptions], Runner]
RUNNERS: dict[str, RunnerFactory] = {}
# The single action space of case envs that are no gymnasium id (runners.pettingzoo's agents)
ACTION_SPACES: dict[str, Callable[[], gym.Space]] = {}


def register_runner(name: str) -> Callable[[RunnerFactory], RunnerFactory]:
    """Decorator adding a runner factory to :data:`RUNNERS` under ``name``."""

    def add(factory: RunnerFactory) -> RunnerFactory:
        if name in RUNNERS:
            raise ValueError(f"runner {name!r} is already registered")
        RUNNERS[name] = factory
        return factory

    return add


def make_env(env_id: str) -> gym.Env:
    """Build one sub-env; a module-level function so worker processes can unpickle it."""
    return gym.make(importable_id(env_id))


def make_env_fns(env_id: str, num_envs: int) -> list[Callable[[], gym.Env]]:
    return [functools.partial(make_env, env_id) for _ in range(num_envs)]


def worker_layout(num_envs: int, options: RunnerOptions) -> tuple[int, int]:
    """``(num_workers, envs_per_worker)`` with ``num_workers * envs_per_worker == num_envs``.

    Missing values are filled in: the most workers that divide ``num_envs`` without exceeding
    the usable cores, then as many envs per worker as that leaves.
    """
    workers, per_worker = options.num_workers, options.envs_per_worker
    if workers is None:
        if per_worker is None:
            cores = min(num_envs, usable_cores())
            workers = max(w for w in range(1, cores + 1) if num_envs % w == 0)
        else:
            workers = num_envs // per_worker
    if per_worker is None:
        per_worker = num_envs // workers
    if workers < 1 or per_worker < 1 or workers * per_worker != num_envs:
        raise ValueError(
            f"num_envs={num_envs} cannot be split into num_workers={options.num_workers} x "
            f"envs_per_worker={options.envs_per_worker}: expected a product equal to num_envs"
        )
    return workers, per_worker


class VectorEnvRunner(Runner):
    """Any ``gymnasium.vector.VectorEnv`` (it autoresets itself, so stepping never stops), or
    a framework-free reference loop of ``runners.bare`` (stepped alike, resetting finished
    sub-envs itself)."""

    def __init__(self, env: Any) -> None:  # a VectorEnv, or a bare loop stepped alike
        self.env = env

    def reset(self, seed: int) -> None:
        self.env.reset(seed=seed)

    def step(self, actions: Any) -> None:
        self.env.step(actions)

    def close(self) -> None:
        self.env.close()


class SB3Runner(Runner):
    """A stable-baselines3 ``VecEnv`` (resets finished sub-envs within ``step``)."""

    def __init__(self, venv: Any) -> None:
        self.venv = venv

    def reset(self, seed: int) -> None:
        self.venv.seed(seed)
        self.venv.reset()

    def step(self, actions: Any) -> None:
        self.venv.step(actions)

    def close(self) -> None:
        self.venv.close()


class TensorDictRunner(Runner):
    """A batched gymvec ``EnvBase`` driven through ``step_and_maybe_reset``."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self._td: Any = None

    def reset(self, seed: int) -> None:
        self.env.set_seed(seed)
        self._td = self.env.reset()

    def step(self, actions: Any) -> None:
        td = self._td
        td["action"] = actions
        _, self._td = self.env.step_and_maybe_reset(td)

    def close(self) -> None:
        self.env.close()

    def prepare_actions(self, actions: Sequence[np.ndarray]) -> list[Any]:
        import torch

        spec = self.env.action_spec
        return [torch.as_tensor(a, dtype=spec.dtype).reshape(spec.shape) for a in actions]


class CollectorRunner(Runner):
    """A torchrl ``Collector`` (random policy) over a torchrl env: one ``step`` is one batch
    of ``frames_per_batch`` frames (the bench's actions are not used)."""

    def __init__(self, env: Any, frames_per_batch: int = 1024) -> None:
        from torchrl.collectors import Collector

        self.env_steps = frames_per_batch
        self.collector = Collector(env, None, frames_per_batch=frames_per_batch, total_frames=-1)
        self._batches: Any = None

    def reset(self, seed: int) -> None:
        self.collector.set_seed(seed)
        self._batches = iter(self.collector)

    def step(self, actions: Any) -> None:
        next(self._batches)

    def close(self) -> None:
        self.collector.shutdown()


class FirstReadyRunner(Runner):
    """A gymnasium face with ``batch_size < num_envs``: each ``step`` sends the actions of the
    sub-envs the last ``recv`` returned, then receives the next first-ready batch."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.env_steps = env.batch_size
        self._env_id: Any = None

    def reset(self, seed: int) -> None:
        self.env.async_reset(seed=seed)
        self._env_id = self._recv_ids()

    def step(self, actions: Any) -> None:
        self.env.send(actions, self._env_id)
        self._env_id = self._recv_ids()

    def _recv_ids(self) -> Any:
        """The next batch; the ids of its sub-envs."""
        return self.env.recv()[-1]["env_id"]

    def close(self) -> None:
        self.env.close()

    def prepare_actions(self, actions: Sequence[np.ndarray]) -> list[Any]:
        return [a[: self.env_steps] for a in actions]


FIRST_READY_BATCH = 8  # the first-ready runners' batch_size (at most num_envs)


class BareFirstReadyRunner(FirstReadyRunner):
    """``runners.bare_first_ready``'s pool, driven as :class:`FirstReadyRunner` drives a face
    (its ``recv`` returns the ids first)."""

    def _recv_ids(self) -> Any:
        return self.env.recv()[0]
