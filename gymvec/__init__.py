"""gymvec: many RL environments at once, fast.

One batch engine (``gymvec.engine``: shared-memory buffers, sub-envs in this process or in
worker processes) under two front ends: tensordict-native batched envs (``gymvec.envs``:
``SerialEnv``, ``ParallelEnv``, ``GymEnv``, ``GymVectorEnvWrapper``) and a gymnasium
``VectorEnv`` face (``gymvec.vector``: ``GymnasiumVectorEnv``, ``SerialVectorEnv``,
``ParallelVectorEnv``), with ``make_vec`` and SB3 in ``gymvec.integrations``.

Names are imported on first use: worker processes import parts of gymvec, and must not pay for
importing torch when their sub-envs do not need it.
"""

from __future__ import annotations

import importlib
from typing import Any

from gymvec.errors import (
    ClosedEnvError,
    MainModuleError,
    SpaceMismatchError,
    SubEnvTimeoutError,
    UnsupportedSpaceError,
    WorkerError,
)

_EXPORTS = {
    "EnvBase": "gymvec.envs.base",
    "step_mdp": "gymvec.envs.base",
    "GymEnv": "gymvec.envs.gym_env",
    "GymVectorEnvWrapper": "gymvec.envs.gym_vector_wrapper",
    "SerialEnv": "gymvec.envs.batched",
    "ParallelEnv": "gymvec.envs.batched",
    "RayEnv": "gymvec.envs.ray_env",
    "GymnasiumVectorEnv": "gymvec.vector.vector_env",
    "SerialVectorEnv": "gymvec.vector.dropin",
    "ParallelVectorEnv": "gymvec.vector.dropin",
    "make_vec": "gymvec.integrations.make_vec",
    "register_vector_ids": "gymvec.integrations.gymnasium_ids",
    "spec_from_space": "gymvec.spaces",
    "space_from_spec": "gymvec.spaces",
    "TensorSpec": "gymvec.specs",
    "Bounded": "gymvec.specs",
    "Unbounded": "gymvec.specs",
    "Categorical": "gymvec.specs",
    "MultiCategorical": "gymvec.specs",
    "Binary": "gymvec.specs",
    "Composite": "gymvec.specs",
    "NonTensor": "gymvec.specs",
}

__all__ = [
    "ClosedEnvError",
    "MainModuleError",
    "SpaceMismatchError",
    "SubEnvTimeoutError",
    "UnsupportedSpaceError",
    "WorkerError",
    *_EXPORTS,
]
__version__ = "0.1.0"


def _register_vector_ids() -> None:
    # gymnasium.make_vec("gymvec:gymvec/<id>") imports gymvec, then looks the id up: the ids
    # exist before that, and gymvec checks the call (modes, ids) as gymnasium_ids explains.
    from gymvec.integrations.gymnasium_ids import install

    install()


_register_vector_ids()


# Submodules reachable as attributes (``gymvec.specs.Bounded`` after ``import gymvec``).
_SUBMODULES = (
    "bench",
    "common",
    "engine",
    "envs",
    "errors",
    "integrations",
    "sb3",
    "spaces",
    "specs",
    "vector",
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"gymvec.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gymvec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
