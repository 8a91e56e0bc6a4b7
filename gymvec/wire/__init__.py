"""What passes between the engine and the sub-envs, wherever they run (torch-free).

``buffers`` (the shared memory's layout: slots, actions, observation lanes), ``commands`` (the
mode bytes a command writes per row, the control block, and the autoreset planner) and
``calls`` (the records of a command or request in flight, which executors advance).
"""
