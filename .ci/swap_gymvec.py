"""pytest plugin: gymnasium's vector classes replaced by gymvec's drop-ins.

Loaded by ``.ci/gymnasium_vector_suite.sh`` to run gymnasium's own ``tests/vector`` against
``SerialVectorEnv`` (for ``SyncVectorEnv``) and ``ParallelVectorEnv`` (for ``AsyncVectorEnv``):
a plugin is imported before the test modules, whose ``from gymnasium.vector import ...`` then
picks the replacements up.
"""

import gymnasium.vector
import gymnasium.vector.async_vector_env
import gymnasium.vector.sync_vector_env

from gymvec import ParallelVectorEnv, SerialVectorEnv

for module in (gymnasium.vector, gymnasium.vector.sync_vector_env):
    module.SyncVectorEnv = SerialVectorEnv
for module in (gymnasium.vector, gymnasium.vector.async_vector_env):
    module.AsyncVectorEnv = ParallelVectorEnv
