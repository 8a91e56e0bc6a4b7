"""tianshou 2.x support: gymvec's vectorizers as tianshou vector envs (``pip install
gymvec[tianshou]``).

``ParallelVectorEnv(env_fns, **options)`` stands for tianshou's ``SubprocVectorEnv`` /
``ShmemVectorEnv``, ``SerialVectorEnv(env_fns)`` for its ``DummyVectorEnv``; a tianshou
``Collector`` takes either, by steps and by episodes.
"""

try:
    import tianshou  # noqa: F401
except ImportError as err:
    raise ImportError(
        "gymvec.tianshou needs tianshou 2.x, which is not installed: pip install gymvec[tianshou]"
    ) from err

from gymvec.tianshou.vector_env import ParallelVectorEnv, SerialVectorEnv, TianshouVectorEnv

__all__ = ["ParallelVectorEnv", "SerialVectorEnv", "TianshouVectorEnv"]
