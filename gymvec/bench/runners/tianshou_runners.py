"""tianshou runners for the bench (``pip install gymvec[tianshou]``): tianshou's own vectorizers
against gymvec's, driven as tianshou's ``Collector`` drives them.

* ``tianshou-shmem``: ``ShmemVectorEnv``, one process per sub-env, observations through shared
  memory (tianshou's fastest);
* ``tianshou-subproc``: ``SubprocVectorEnv``, one process per sub-env, everything pickled;
* ``gymvec-tianshou``: ``gymvec.tianshou.ParallelVectorEnv`` in gymvec's layout
  (``num_workers`` processes, several sub-envs each).

Each ``step`` steps every sub-env, then resets the finished ones with ``reset(env_id=...)``,
as the collector does (tianshou's vector envs do not autoreset).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gymvec.bench.runners.base import Runner, RunnerOptions, SB3Runner, make_env_fns, worker_layout
from gymvec.bench.runners.base import register_runner as _register


class TianshouRunner(SB3Runner):
    """A tianshou vector env: step all sub-envs, reset the finished ones (seeded, reset and
    closed as SB3's vector envs are)."""

    def step(self, actions: Any) -> None:
        _, _, terminated, truncated, _ = self.venv.step(actions)
        finished = np.flatnonzero(terminated | truncated)
        if finished.size:
            self.venv.reset(env_id=finished)


def _tianshou_env() -> Any:
    try:
        import tianshou.env
    except ImportError as e:
        raise ImportError("tianshou's runners need tianshou: pip install gymvec[tianshou]") from e
    return tianshou.env


@_register("tianshou-shmem")
def _tianshou_shmem(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return TianshouRunner(_tianshou_env().ShmemVectorEnv(make_env_fns(env_id, num_envs)))


@_register("tianshou-subproc")
def _tianshou_subproc(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return TianshouRunner(_tianshou_env().SubprocVectorEnv(make_env_fns(env_id, num_envs)))


@_register("gymvec-tianshou")
def _gymvec_tianshou(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    _tianshou_env()
    from gymvec.tianshou import ParallelVectorEnv

    num_workers, _ = worker_layout(num_envs, options)
    env_fns = make_env_fns(env_id, num_envs)
    return TianshouRunner(ParallelVectorEnv(env_fns, num_workers=num_workers))
