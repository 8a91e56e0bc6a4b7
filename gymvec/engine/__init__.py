"""The batch engine under both front ends: what a step is (torch-free).

Packages bottom up: ``gymvec.wire`` (the shared memory and the mode bytes), ``gymvec.subenvs``
(sub-envs and their drivers), ``gymvec.backends`` (where sub-envs run), and this one:
``engine`` (:class:`BatchEngine`: the whole-batch verbs) with its parts ``life`` (``CallLife``:
the call in flight), ``first_ready``, ``requests`` and ``info_learning``, each given what it
uses rather than the engine; ``protocol`` (what the front ends need).
"""

from gymvec.backends.backend import Backend, ExecutorStart, process_backend, serial_backend
from gymvec.backends.executor import Executor
from gymvec.backends.local import LocalExecutor
from gymvec.backends.processes.executor import ProcessOptions
from gymvec.engine.engine import BatchEngine
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.probe import expand_seeds
from gymvec.wire.calls import Call, Command, Ready, Received, Request
from gymvec.wire.commands import NOTHING, Extras, Mode, Modes

__all__ = [
    "NOTHING",
    "Backend",
    "BatchEngine",
    "Call",
    "Command",
    "Executor",
    "ExecutorStart",
    "Extras",
    "LocalExecutor",
    "Mode",
    "Modes",
    "ProcessOptions",
    "Ready",
    "Received",
    "Request",
    "SubEnvFactories",
    "expand_seeds",
    "process_backend",
    "serial_backend",
]
