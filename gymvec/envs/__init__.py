"""The tensordict API (torchrl's ``EnvBase`` calls): ``EnvBase``, ``GymEnv``, ``SerialEnv``,
``ParallelEnv``, ``RayEnv`` and ``GymVectorEnvWrapper``; the gymnasium ``VectorEnv`` API is
:mod:`gymvec.vector`'s. The top-level ``gymvec`` exports these classes."""
