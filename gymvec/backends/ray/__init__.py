"""Sub-envs on Ray actors: ``executor`` (the caller's side) and ``worker`` (the actor)."""
