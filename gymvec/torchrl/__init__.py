"""torchrl interop (optional: ``pip install -e ".[torchrl]"`` in gymvec's checkout).

- :func:`to_torchrl`: a batched gymvec env as a ``torchrl.envs.EnvBase``
  (:class:`GymvecWrapper`), for torchrl's transforms, collectors, ``check_env_specs`` and
  losses.
- :func:`from_torchrl`: a batched torchrl env (``ParallelEnv``, ``SerialEnv``,
  ``TransformedEnv``...) as a gymvec ``EnvBase`` (:class:`TorchRLEnvWrapper`), and so, through
  ``gymvec.GymnasiumVectorEnv``, as a gymnasium ``VectorEnv`` (``GymnasiumVectorEnv`` takes a
  torchrl env directly and wraps it).
- :func:`to_torchrl_spec`, :func:`from_torchrl_spec`: the specs, leaf by leaf.

Nothing else in gymvec imports torchrl.
"""

from __future__ import annotations

try:
    import torchrl  # noqa: F401
except ImportError as error:
    raise ImportError(
        "gymvec.torchrl needs torchrl, which is not installed: pip install torchrl (or, in "
        "gymvec's checkout, pip install -e '.[torchrl]') "
        "(torchrl 0.14 pins tensordict 0.14.x, which gymvec supports)"
    ) from error

from gymvec.torchrl.gymvec_wrapper import GymvecWrapper, to_torchrl
from gymvec.torchrl.specs import from_torchrl_spec, to_torchrl_spec
from gymvec.torchrl.torchrl_env_wrapper import TorchRLEnvWrapper, from_torchrl

__all__ = [
    "GymvecWrapper",
    "TorchRLEnvWrapper",
    "from_torchrl",
    "from_torchrl_spec",
    "to_torchrl",
    "to_torchrl_spec",
]
