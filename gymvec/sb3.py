"""Stable-Baselines3 support: ``SB3VecEnv`` and ``to_sb3`` (``pip install gymvec[sb3]``)."""

try:
    import stable_baselines3  # noqa: F401
except ImportError as err:
    raise ImportError("stable-baselines3 is not installed: pip install gymvec[sb3]") from err

from gymvec.integrations.sb3_vec_env import SB3VecEnv, to_sb3

__all__ = ["SB3VecEnv", "to_sb3"]
