"""PettingZoo multi-agent envs in gymvec: agents as rows of a gymnasium vector env.

* :class:`AgentRowsBlock` (also ``PettingZooBlock``): PettingZoo parallel envs as one
  ``gymnasium.vector.VectorEnv`` whose rows are their agents (row ``e * A + k`` is
  ``possible_agents[k]`` of env ``e``), the block that gymvec's engine runs in each worker.
* :func:`make_vec`: ``num_envs`` such envs over gymvec's ``ParallelVectorEnv`` (or
  ``SerialVectorEnv``), one block per worker; ``envs.rows`` lists ``(env, agent)`` per row.
* :class:`EnvRowsBlock` (also ``PettingZooEnvBlock``): PettingZoo parallel envs as a vector
  env whose rows are the envs, their agents in groups (``Dict`` spaces per group), in DISABLED
  autoreset mode.
* :func:`make_env`: ``num_envs`` such envs as a tensordict batched env (:class:`PettingZooEnv`)
  in torchrl's multi-agent layout: per group, ``(group, "observation")``, ``(group,
  "action")``, ``("next", group, "reward")``, ``(group, "mask")``, per-agent and per-env done
  keys.

Needs pettingzoo: ``pip install 'gymvec[pettingzoo]'``.
"""

try:
    import pettingzoo  # noqa: F401
except ImportError as err:
    raise ImportError(
        "pettingzoo is not installed: pip install 'gymvec[pettingzoo]' (or pip install pettingzoo)"
    ) from err

from typing import TYPE_CHECKING, Any

from gymvec.pettingzoo.agent_rows import AgentRowsBlock
from gymvec.pettingzoo.agents import default_groups
from gymvec.pettingzoo.env_rows import EnvRowsBlock
from gymvec.pettingzoo.make_vec import make_vec

# The names these blocks had first, kept for the code that imports them.
PettingZooBlock = AgentRowsBlock
PettingZooEnvBlock = EnvRowsBlock

if TYPE_CHECKING:
    from gymvec.pettingzoo.tensordict_env import PettingZooEnv, make_env


def __getattr__(name: str) -> Any:
    # The tensordict side imports torch: loaded on first use, so that the workers, which
    # import this package to build the blocks, stay torch-free.
    if name in ("PettingZooEnv", "make_env"):
        from gymvec.pettingzoo import tensordict_env

        value = globals()[name] = getattr(tensordict_env, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AgentRowsBlock",
    "EnvRowsBlock",
    "PettingZooBlock",
    "PettingZooEnv",
    "PettingZooEnvBlock",
    "default_groups",
    "make_env",
    "make_vec",
]
