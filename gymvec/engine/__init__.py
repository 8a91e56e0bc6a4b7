"""The batch engine under both front ends (torch-free; worker processes import it).

Layers, bottom up: ``buffers`` (the shared block and its views), ``commands`` (the mode bytes a
command sends, the one protocol, and the autoreset planner), ``sub_env_kinds`` (what can be a
sub-env), ``drivers`` (sub-envs carrying commands out), ``subenvs`` (the sub-envs of one
process and the requests they answer), ``calls`` (the records of a call and its life),
``executor``/``processes``/``worker`` (where sub-envs run), ``backends`` (which executor, which
memory), ``engine`` (:class:`BatchEngine`: the whole-batch verbs) with its parts
``first_ready``, ``requests`` and ``info_learning``; ``protocol`` (what the front ends need).
"""

from gymvec.engine.backends import Backend, ExecutorStart, process_backend, serial_backend
from gymvec.engine.calls import Call, Command, Ready, Received, Request
from gymvec.engine.commands import NOTHING, Autoreset, Extras, Mode, Modes
from gymvec.engine.engine import BatchEngine
from gymvec.engine.executor import Executor, LocalExecutor
from gymvec.engine.factories import SubEnvFactories
from gymvec.engine.layout_probe import expand_seeds
from gymvec.engine.processes import ProcessOptions

__all__ = [
    "NOTHING",
    "Autoreset",
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
