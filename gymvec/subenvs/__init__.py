"""Sub-envs: what can be one, how each is built, and how it carries out a command (torch-free).

``kinds`` (the registry of sub-env kinds: gymnasium envs here, tensordict envs registered by
``gymvec.envs``), ``factories`` (which factory builds which sub-env), ``probe`` (the layout
learnt from the first sub-env; seeds), ``drivers`` (a sub-env carrying out its rows' mode
bytes) and ``group`` (the sub-envs of one process and the requests they answer).
"""
