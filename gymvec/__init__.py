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
from typing import TYPE_CHECKING, Any

from gymvec.errors import (
    ClosedEnvError,
    MainModuleError,
    SpaceMismatchError,
    SubEnvTimeoutError,
    UnsupportedSpaceError,
    WorkerError,
)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ imports them
    # (``X as X``: an explicit re-export)
    from gymvec import bench as bench
    from gymvec import common as common
    from gymvec import engine as engine
    from gymvec import envs as envs
    from gymvec import errors as errors
    from gymvec import integrations as integrations
    from gymvec import sb3 as sb3
    from gymvec import spaces as spaces
    from gymvec import specs as specs
    from gymvec import vector as vector
    from gymvec.common.faults import Fault as Fault
    from gymvec.common.faults import Restart as Restart
    from gymvec.envs.base import EnvBase as EnvBase
    from gymvec.envs.base import step_mdp as step_mdp
    from gymvec.envs.gym_env import GymEnv as GymEnv
    from gymvec.envs.gym_vector_wrapper import GymVectorEnvWrapper as GymVectorEnvWrapper
    from gymvec.envs.parallel_env import ParallelEnv as ParallelEnv
    from gymvec.envs.ray_env import RayEnv as RayEnv
    from gymvec.envs.serial_env import SerialEnv as SerialEnv
    from gymvec.integrations.gymnasium_ids import register_vector_ids as register_vector_ids
    from gymvec.integrations.make_vec import make_vec as make_vec
    from gymvec.layout.auto import autotune as autotune
    from gymvec.spaces import space_from_spec as space_from_spec
    from gymvec.spaces import spec_from_space as spec_from_space
    from gymvec.specs import Binary as Binary
    from gymvec.specs import Bounded as Bounded
    from gymvec.specs import Categorical as Categorical
    from gymvec.specs import Composite as Composite
    from gymvec.specs import MultiCategorical as MultiCategorical
    from gymvec.specs import NonTensor as NonTensor
    from gymvec.specs import TensorSpec as TensorSpec
    from gymvec.specs import Unbounded as Unbounded
    from gymvec.subenvs.factories import BlockFactory as BlockFactory
    from gymvec.vector.dropin import ParallelVectorEnv as ParallelVectorEnv
    from gymvec.vector.dropin import SerialVectorEnv as SerialVectorEnv
    from gymvec.vector.vector_env import GymnasiumVectorEnv as GymnasiumVectorEnv

_EXPORTS = {
    "EnvBase": "gymvec.envs.base",
    "step_mdp": "gymvec.envs.base",
    "GymEnv": "gymvec.envs.gym_env",
    "GymVectorEnvWrapper": "gymvec.envs.gym_vector_wrapper",
    "SerialEnv": "gymvec.envs.serial_env",
    "ParallelEnv": "gymvec.envs.parallel_env",
    "RayEnv": "gymvec.envs.ray_env",
    "GymnasiumVectorEnv": "gymvec.vector.vector_env",
    "SerialVectorEnv": "gymvec.vector.dropin",
    "ParallelVectorEnv": "gymvec.vector.dropin",
    "make_vec": "gymvec.integrations.make_vec",
    "autotune": "gymvec.layout.auto",
    "BlockFactory": "gymvec.subenvs.factories",
    "Fault": "gymvec.common.faults",
    "Restart": "gymvec.common.faults",
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
