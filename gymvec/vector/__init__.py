"""The gymnasium ``VectorEnv`` API: ``GymnasiumVectorEnv`` and the drop-ins ``SerialVectorEnv``
and ``ParallelVectorEnv`` (numpy in and out, no torch); the tensordict API is
:mod:`gymvec.envs`'. The top-level ``gymvec`` exports these classes."""
