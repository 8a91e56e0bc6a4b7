"""Stable-Baselines3 support: ``SB3VecEnv`` and ``to_sb3`` over a vector env, and
``ParallelVecEnv`` / ``SerialVecEnv`` built from env functions, as SB3's ``SubprocVecEnv`` /
``DummyVecEnv`` are (``make_vec_env(..., vec_env_cls=ParallelVecEnv)``). Needs stable-baselines3:
in gymvec's checkout, ``pip install -e ".[sb3]"``."""

try:
    import stable_baselines3  # noqa: F401
except ImportError as err:
    raise ImportError(
        "stable-baselines3 is not installed: pip install stable-baselines3 (or, in gymvec's "
        "checkout, pip install -e '.[sb3]')"
    ) from err

from gymvec.integrations.sb3_vec_env import SB3VecEnv, to_sb3
from gymvec.integrations.sb3_vectorizers import ParallelVecEnv, SerialVecEnv

__all__ = ["ParallelVecEnv", "SB3VecEnv", "SerialVecEnv", "to_sb3"]
