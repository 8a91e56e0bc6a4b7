"""Functions the SB3 adapter runs on one sub-env, possibly inside a worker process.

They live apart from ``sb3.py`` because (cloud)pickle sends module-level functions by
reference: a worker that runs one imports its module, and this one imports neither
stable-baselines3 nor torch. Method arguments travel packed, so a method keyword argument
named ``indices`` cannot collide with ``apply``'s own.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def call_method(env: gym.Env, name: str, args: tuple, kwargs: dict) -> Any:
    return get_attr(env, name)(*args, **kwargs)


def get_attr(env: gym.Env | gym.vector.VectorEnv, name: str) -> Any:
    # a block (a VectorEnv: gymvec.atari's, gymvec.pettingzoo's) has no wrapper chain to search
    return env.get_wrapper_attr(name) if isinstance(env, gym.Env) else getattr(env, name)


def set_attr(env: gym.Env, name: str, value: Any) -> None:
    # Like gymnasium's vector ``set_attr``: set it on the wrapper layer that already has it.
    env.set_wrapper_attr(name, value)


def is_wrapped(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> bool:
    """Whether some layer of ``env``'s wrapper chain is a ``wrapper_class``."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False
