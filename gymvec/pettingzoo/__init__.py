"""PettingZoo multi-agent envs in gymvec: agents as rows of a gymnasium vector env.

* :class:`PettingZooBlock`: PettingZoo parallel envs as one ``gymnasium.vector.VectorEnv``
  whose rows are their agents (row ``e * A + k`` is ``possible_agents[k]`` of env ``e``), the
  block that gymvec's engine runs in each worker.
* :func:`make_vec`: ``num_envs`` such envs over gymvec's ``ParallelVectorEnv`` (or
  ``SerialVectorEnv``), one block per worker; ``envs.rows`` lists ``(env, agent)`` per row.

Needs pettingzoo: ``pip install 'gymvec[pettingzoo]'``.
"""

try:
    import pettingzoo  # noqa: F401
except ImportError as err:
    raise ImportError(
        "pettingzoo is not installed: pip install 'gymvec[pettingzoo]' (or pip install pettingzoo)"
    ) from err

from gymvec.pettingzoo.agents import default_groups
from gymvec.pettingzoo.block import PettingZooBlock
from gymvec.pettingzoo.make_vec import make_vec

__all__ = ["PettingZooBlock", "default_groups", "make_vec"]
