"""SB3 vectorizers that take env functions, as ``SubprocVecEnv`` and ``DummyVecEnv`` do.

Stable-Baselines3 chooses a vectorizer by class: ``make_vec_env(env_id, n_envs,
vec_env_cls=..., vec_env_kwargs=...)`` calls ``vec_env_cls(env_fns, **vec_env_kwargs)``, and
rl-zoo3 does the same with its ``--vec-env`` choice. These classes have that constructor and
build the same-step gymvec vector env that ``SB3VecEnv`` translates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from gymvec.common.faults import Restart
from gymvec.integrations.sb3_vec_env import SB3VecEnv

__all__ = ["ParallelVecEnv", "SerialVecEnv"]


def _check_no_autoreset_mode(options: dict[str, Any], cls_name: str) -> None:
    if "autoreset_mode" in options:
        raise ValueError(
            f"{cls_name}: autoreset_mode is not an option here: SB3 resets finished sub-envs "
            f"within the step, so {cls_name} always builds its vector env with "
            f"autoreset_mode='same_step' (got autoreset_mode={options['autoreset_mode']!r})"
        )


def _init_over(sb3_env: SB3VecEnv, vector_env: VectorEnv) -> None:
    """``SB3VecEnv.__init__`` over a vector env built for it, closed if that fails."""
    try:
        SB3VecEnv.__init__(sb3_env, vector_env)
    except BaseException:
        vector_env.close()
        raise


class SerialVecEnv(SB3VecEnv):
    """gymvec's ``SerialVectorEnv`` as an SB3 ``VecEnv``, built like ``DummyVecEnv(env_fns)``.

    Args:
        env_fns: functions that each build one ``gymnasium.Env``.
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart``: a sub-env that raises
            is rebuilt, its step done with ``TimeLimit.truncated`` and ``infos[i]["fault"]``
            (see ``docs/faults.md``).

    With the same seed it gives ``DummyVecEnv``'s observations, rewards, dones and infos; the
    sub-envs live in this process (``envs``, as ``DummyVecEnv.envs``).
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], gym.Env]], *, on_fault: str | Restart = "raise"
    ) -> None:
        from gymvec.vector.dropin import SerialVectorEnv

        vector_env = SerialVectorEnv(
            env_fns, autoreset_mode=AutoresetMode.SAME_STEP, on_fault=on_fault
        )
        _init_over(self, vector_env)


class ParallelVecEnv(SB3VecEnv):
    """gymvec's ``ParallelVectorEnv`` as an SB3 ``VecEnv``, built like ``SubprocVecEnv``.

    Args:
        env_fns: functions that each build one ``gymnasium.Env`` (pickled to the workers
            with cloudpickle, so closures such as ``make_vec_env``'s work).
        start_method: the workers' start method ("fork", "spawn", "forkserver"), as
            ``SubprocVecEnv``'s; ``None``: gymvec's default.
        **options: ``ParallelVectorEnv``'s options (``num_workers``, ``local_worker``,
            ``timeout``, ``on_fault``, ``shared_memory``, ``copy``, ``daemon``...), except
            ``autoreset_mode``, which is always same-step here. ``num_workers`` is at most
            one per sub-env (the trainers' eval envs, built with the same kwargs, are small).

    Example (SB3's own idiom)::

        make_vec_env("CartPole-v1", 8, vec_env_cls=ParallelVecEnv,
                     vec_env_kwargs={"num_workers": 2})
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        start_method: str | None = None,
        **options: Any,
    ) -> None:
        from gymvec.vector.dropin import ParallelVectorEnv

        _check_no_autoreset_mode(options, "ParallelVecEnv")
        if start_method is not None and options.get("context") not in (None, start_method):
            raise ValueError(
                "ParallelVecEnv: start_method and context both name the start method and "
                f"differ (start_method={start_method!r}, context={options['context']!r}); "
                "give one of them"
            )
        options["context"] = start_method if start_method is not None else options.get("context")
        num_workers = options.get("num_workers")
        if isinstance(num_workers, int) and not isinstance(num_workers, bool):
            # One vec_env_kwargs serves every env a trainer builds: rl-zoo3 builds its
            # one-env eval env with the training env's. More workers than sub-envs: one each.
            options["num_workers"] = min(num_workers, max(len(env_fns), 1))
        _init_over(
            self, ParallelVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP, **options)
        )
