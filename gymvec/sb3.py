"""Stable-Baselines3 support: ``SB3VecEnv`` and ``to_sb3`` (needs stable-baselines3: in
gymvec's checkout, ``pip install -e ".[sb3]"``)."""

try:
    import stable_baselines3  # noqa: F401
except ImportError as err:
    raise ImportError(
        "stable-baselines3 is not installed: pip install stable-baselines3 (or, in gymvec's "
        "checkout, pip install -e '.[sb3]')"
    ) from err

from gymvec.integrations.sb3_vec_env import SB3VecEnv, to_sb3

__all__ = ["SB3VecEnv", "to_sb3"]
