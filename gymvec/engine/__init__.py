"""The batch engine under both front ends (torch-free; worker processes import it).

Layers, bottom up: ``buffers`` (the shared block and its views), ``commands`` (the mode bytes a
command sends, the one protocol), ``drivers`` (sub-envs carrying commands out), ``subenvs``
(the sub-envs of one process and the requests they answer), ``executor``/``processes``/
``worker`` (where sub-envs run), ``engine`` (:class:`BatchEngine`: the verbs).
"""

from gymvec.engine.commands import NOTHING, Autoreset, Extras, Mode
from gymvec.engine.engine import (
    Backend,
    BatchEngine,
    Ready,
    Received,
    expand_seeds,
    process_backend,
    serial_backend,
)
from gymvec.engine.executor import Call, Executor, LocalExecutor
from gymvec.engine.factories import SubEnvFactories
from gymvec.engine.processes import ProcessOptions

__all__ = [
    "NOTHING",
    "Autoreset",
    "Backend",
    "BatchEngine",
    "Call",
    "Executor",
    "Extras",
    "LocalExecutor",
    "Mode",
    "ProcessOptions",
    "Ready",
    "Received",
    "SubEnvFactories",
    "expand_seeds",
    "process_backend",
    "serial_backend",
]
