"""The runners the bench compares: the interface and registry (`base`), the built-in runners
(`builtin`), the framework-free reference loops (`bare`, `bare_first_ready`), and the Ray and
tianshou runners; `ray_costs` measures Ray's constants.

Importing this package registers every runner in :data:`RUNNERS` (each framework is imported
only when one of its runners is built).
"""

# Registration order is the order of RUNNERS: the blocks case's, the built-in runners, then
# Ray's, then tianshou's.
from gymvec.bench.runners import (  # noqa: F401
    blocks,
    builtin,
    pettingzoo,
    ray_runners,
    tianshou_runners,
)
from gymvec.bench.runners.base import (
    ACTION_SPACES,
    FIRST_READY_BATCH,
    RUNNERS,
    BareFirstReadyRunner,
    CollectorRunner,
    FirstReadyRunner,
    Runner,
    RunnerFactory,
    RunnerOptions,
    SB3Runner,
    TensorDictRunner,
    VectorEnvRunner,
    make_env,
    make_env_fns,
    register_runner,
    usable_cores,
    worker_layout,
)

__all__ = [
    "ACTION_SPACES",
    "FIRST_READY_BATCH",
    "RUNNERS",
    "BareFirstReadyRunner",
    "CollectorRunner",
    "FirstReadyRunner",
    "Runner",
    "RunnerFactory",
    "RunnerOptions",
    "SB3Runner",
    "TensorDictRunner",
    "VectorEnvRunner",
    "make_env",
    "make_env_fns",
    "register_runner",
    "usable_cores",
    "worker_layout",
]
