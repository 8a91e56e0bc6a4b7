"""Sub-envs in worker processes: ``executor`` (the parent's side), ``handles`` (the parent's end
of one worker), ``rows`` (first-ready rows) and ``worker`` (the worker process itself)."""
