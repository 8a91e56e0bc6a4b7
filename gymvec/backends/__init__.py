"""Where sub-envs run: one package per backend, all behind ``executor.Executor``.

``backend`` (``Backend``: which executor and which memory; ``ExecutorStart``), ``local``
(this process), ``processes`` (worker processes over shared memory) and ``ray`` (Ray actors,
imported only by ``RayEnv``); ``pickling`` (factories on their way to a worker).
"""
