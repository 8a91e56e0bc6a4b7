"""pytest plugin: SB3's DummyVecEnv and SubprocVecEnv replaced by gymvec's SB3VecEnv.

Loaded by ``.ci/sb3_vec_env_suite.sh`` to run Stable-Baselines3's own vec-env tests against
``SB3VecEnv`` over ``SerialVectorEnv`` (for ``DummyVecEnv``) and ``ParallelVectorEnv`` (for
``SubprocVecEnv``), both in same-step autoreset mode, as SB3 wants.
"""

import stable_baselines3.common.vec_env as vec_env_module

from gymvec import ParallelVectorEnv, SerialVectorEnv
from gymvec.sb3 import SB3VecEnv


class SerialSB3VecEnv(SB3VecEnv):
    def __init__(self, env_fns):
        super().__init__(SerialVectorEnv(env_fns, autoreset_mode="same_step"))


class ParallelSB3VecEnv(SB3VecEnv):
    def __init__(self, env_fns, start_method=None):
        vector_env = ParallelVectorEnv(env_fns, context=start_method, autoreset_mode="same_step")
        super().__init__(vector_env)


vec_env_module.DummyVecEnv = SerialSB3VecEnv
vec_env_module.SubprocVecEnv = ParallelSB3VecEnv
