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
import multiprocessing as mp
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from gymvec.bench.envs import importable_id
from gymvec.common.cores import usable_cores  # noqa: F401 (the bench's report reads it here)


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
# The single action space of case envs that are no gymnasium id (bench.pettingzoo's agents)
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
    """Any ``gymnasium.vector.VectorEnv`` (it autoresets itself, so stepping never stops)."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
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


class BareRunner(Runner):
    """A framework-free reference loop of ``bench.bare`` (it resets finished sub-envs itself)."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop

    def reset(self, seed: int) -> None:
        self.loop.reset(seed)

    def step(self, actions: Any) -> None:
        self.loop.step(actions)

    def close(self) -> None:
        self.loop.close()


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
    """``bench.bare_first_ready``'s pool, driven as :class:`FirstReadyRunner` drives a face
    (its ``recv`` returns the ids first)."""

    def _recv_ids(self) -> Any:
        return self.env.recv()[0]


@register_runner("gym-sync")
def _gym_sync(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return VectorEnvRunner(gym.vector.SyncVectorEnv(make_env_fns(env_id, num_envs)))


@register_runner("gym-async")
def _gym_async(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return VectorEnvRunner(gym.vector.AsyncVectorEnv(make_env_fns(env_id, num_envs)))


@register_runner("sb3-subproc")
def _sb3_subproc(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    try:
        from stable_baselines3.common.vec_env import SubprocVecEnv
    except ImportError as e:
        raise ImportError(
            "sb3-subproc needs stable-baselines3: pip install stable-baselines3"
        ) from e
    # SB3 defaults to forkserver, where every worker re-imports SB3 and torch (seconds each);
    # fork, gymnasium's default here, starts them at once and steps no differently.
    start_method = "fork" if "fork" in mp.get_all_start_methods() else None
    return SB3Runner(SubprocVecEnv(make_env_fns(env_id, num_envs), start_method=start_method))


@register_runner("sb3-dummy")
def _sb3_dummy(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    try:
        from stable_baselines3.common.vec_env import DummyVecEnv
    except ImportError as e:
        raise ImportError("sb3-dummy needs stable-baselines3: pip install stable-baselines3") from e
    return SB3Runner(DummyVecEnv(make_env_fns(env_id, num_envs)))


@register_runner("gymvec-sb3")
def _gymvec_sb3(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """SB3's VecEnv API over gymvec's parallel drop-in (same-step autoreset, as SB3 wants)."""
    from gymvec import ParallelVectorEnv
    from gymvec.sb3 import SB3VecEnv

    env = ParallelVectorEnv(
        make_env_fns(env_id, num_envs), num_workers=options.num_workers, autoreset_mode="same_step"
    )
    return SB3Runner(SB3VecEnv(env))


@register_runner("torchrl-parallel")
def _torchrl_parallel(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """torchrl's ParallelEnv (optional, ``pip install torchrl``) in gymvec's layout: each worker
    process a torchrl SerialEnv of ``envs_per_worker`` GymEnvs (faster there than one process
    per sub-env), driven through ``step_and_maybe_reset`` like gymvec-td."""
    return TensorDictRunner(_torchrl_parallel_env(env_id, num_envs, options))


def _torchrl_parallel_env(env_id: str, num_envs: int, options: RunnerOptions) -> Any:
    try:
        from torchrl.envs import GymEnv, ParallelEnv, SerialEnv
    except ImportError as e:
        raise ImportError("torchrl's runners need torchrl: pip install torchrl") from e
    num_workers, envs_per_worker = worker_layout(num_envs, options)
    make_sub_env = functools.partial(
        GymEnv, importable_id(env_id), categorical_action_encoding=True
    )
    make_worker_env = functools.partial(SerialEnv, envs_per_worker, make_sub_env)
    start_method = "fork" if "fork" in mp.get_all_start_methods() else None
    return ParallelEnv(num_workers, make_worker_env, mp_start_method=start_method)


@register_runner("collector-torchrl")
def _collector_torchrl(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """A torchrl collector (frames_per_batch 1024, random policy) over torchrl's ParallelEnv in
    gymvec's layout (see torchrl-parallel)."""
    return CollectorRunner(_torchrl_parallel_env(env_id, num_envs, options))


@register_runner("collector-gymvec")
def _collector_gymvec(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The same collector over gymvec's ParallelEnv (the gymvec-td layout) through
    ``gymvec.torchrl.to_torchrl``, device-less as torchrl's ParallelEnv of GymEnv is (so that
    neither collector casts each step's data to a device)."""
    try:
        from gymvec.torchrl import to_torchrl
    except ImportError as e:
        raise ImportError("collector-gymvec needs torchrl: pip install torchrl") from e
    env = _gymvec_parallel_env(env_id, num_envs, options)
    return CollectorRunner(to_torchrl(env, device_agnostic=True))


@register_runner("bare-first-ready")
def _bare_first_ready(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The reference for gymvec-first-ready in its layout (its worker processes, none in the
    calling process): batches of the first ``FIRST_READY_BATCH`` to finish, nothing else (see
    ``bench.bare_first_ready``)."""
    from gymvec.bench.bare_first_ready import BareFirstReady

    num_workers, _ = worker_layout(num_envs, options)
    batch_size = min(FIRST_READY_BATCH, num_envs)
    return BareFirstReadyRunner(
        BareFirstReady(make_env_fns(env_id, num_envs), batch_size, num_workers)
    )


@register_runner("bare-loop")
def _bare_loop(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The one-core reference: every sub-env stepped in a plain loop (see ``bench.bare``)."""
    from gymvec.bench.bare import BareLoop

    return BareRunner(BareLoop(make_env_fns(env_id, num_envs)))


@register_runner("bare-parallel")
def _bare_parallel(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The reference for gymvec's parallel layout with nothing else in it (see ``bench.bare``)."""
    from gymvec.bench.bare import BareParallel

    num_workers, _ = worker_layout(num_envs, options)
    return BareRunner(BareParallel(make_env_fns(env_id, num_envs), num_workers))


@register_runner("bare-free")
def _bare_free(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """``bare-parallel`` whose processes do not wait for each other's step (see
    ``bench.bare``): what the machine gives this split at all, lock-step or not."""
    from gymvec.bench.bare import FREE_LAG, BareParallel

    num_workers, _ = worker_layout(num_envs, options)
    return BareRunner(BareParallel(make_env_fns(env_id, num_envs), num_workers, lag=FREE_LAG))


@register_runner("gymvec-serial")
def _gymvec_serial(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec import SerialVectorEnv

    return VectorEnvRunner(SerialVectorEnv(make_env_fns(env_id, num_envs)))


@register_runner("gymvec-parallel")
def _gymvec_parallel(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec import ParallelVectorEnv

    num_workers, _ = worker_layout(num_envs, options)
    return VectorEnvRunner(
        ParallelVectorEnv(make_env_fns(env_id, num_envs), num_workers=num_workers)
    )


@register_runner("gymvec-first-ready")
def _gymvec_first_ready(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """gymvec's parallel drop-in with first-ready batches of ``FIRST_READY_BATCH`` sub-envs,
    with the defaults otherwise (first-ready: the calling process only sends and receives)."""
    from gymvec import ParallelVectorEnv

    num_workers, _ = worker_layout(num_envs, options)
    env = ParallelVectorEnv(
        make_env_fns(env_id, num_envs),
        num_workers=num_workers,
        batch_size=min(FIRST_READY_BATCH, num_envs),
    )
    return FirstReadyRunner(env)


@register_runner("gymvec-td")
def _gymvec_td(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return TensorDictRunner(_gymvec_parallel_env(env_id, num_envs, options))


def _gymvec_parallel_env(env_id: str, num_envs: int, options: RunnerOptions) -> Any:
    from gymvec import ParallelEnv
    from gymvec.options import default_local_worker

    num_workers, envs_per_worker = worker_layout(num_envs, options)
    # Factories of gymnasium envs: workers then never import torch (GymEnv wraps them in the
    # parent). The layout is the one ParallelVectorEnv picks by default.
    return ParallelEnv(
        num_workers=num_workers,
        create_env_fn=functools.partial(gym.make, importable_id(env_id)),
        envs_per_worker=envs_per_worker,
        local_worker=default_local_worker(num_workers),
    )
