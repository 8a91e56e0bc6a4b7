"""The built-in runners: gymnasium's, stable-baselines3's, torchrl's, gymvec's and the bare
reference loops (the Ray and tianshou ones are in their own modules)."""

from __future__ import annotations

import functools
import multiprocessing as mp
from typing import Any

import gymnasium as gym

from gymvec.bench.envs import importable_id
from gymvec.bench.runners.base import (
    FIRST_READY_BATCH,
    BareFirstReadyRunner,
    CollectorRunner,
    FirstReadyRunner,
    Runner,
    RunnerOptions,
    SB3Runner,
    TensorDictRunner,
    VectorEnvRunner,
    make_env_fns,
    register_runner,
    worker_layout,
)


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
    ``runners.bare_first_ready``)."""
    from gymvec.bench.runners.bare_first_ready import BareFirstReady

    num_workers, _ = worker_layout(num_envs, options)
    batch_size = min(FIRST_READY_BATCH, num_envs)
    return BareFirstReadyRunner(
        BareFirstReady(make_env_fns(env_id, num_envs), batch_size, num_workers)
    )


@register_runner("bare-loop")
def _bare_loop(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The one-core reference: every sub-env stepped in a plain loop (see ``runners.bare``)."""
    from gymvec.bench.runners.bare import BareLoop

    return VectorEnvRunner(BareLoop(make_env_fns(env_id, num_envs)))


@register_runner("bare-parallel")
def _bare_parallel(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """The reference for gymvec's parallel layout with nothing else in it (see ``runners.bare``)."""
    from gymvec.bench.runners.bare import BareParallel

    num_workers, _ = worker_layout(num_envs, options)
    return VectorEnvRunner(BareParallel(make_env_fns(env_id, num_envs), num_workers))


@register_runner("bare-free")
def _bare_free(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    """``bare-parallel`` whose processes do not wait for each other's step (see
    ``runners.bare``): what the machine gives this split at all, lock-step or not."""
    from gymvec.bench.runners.bare import FREE_LAG, BareParallel

    num_workers, _ = worker_layout(num_envs, options)
    return VectorEnvRunner(BareParallel(make_env_fns(env_id, num_envs), num_workers, lag=FREE_LAG))


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
