"""The gymvec benchmark: ``python -m gymvec.bench`` (see ``--help``).

Importing this package registers the bench envs (``GymvecBench/BusyStep-v0``,
``GymvecBench/ImageObs-v0``) with gymnasium.
"""

# The Ray, tianshou and PettingZoo runners register themselves (each framework is imported only
# when one of its runners is built).
from gymvec.bench import pettingzoo, ray_runners, tianshou_runners  # noqa: E402, F401, I001
from gymvec.bench.cases import CASES, DEFAULT_CASES, Case
from gymvec.bench.envs import BusyStepEnv, ImageObsEnv, register_bench_envs
from gymvec.bench.harness import CaseResult, RunnerResult, Settings, run_case, run_cases
from gymvec.bench.runners import RUNNERS, Runner, RunnerOptions, register_runner

__all__ = [
    "CASES",
    "DEFAULT_CASES",
    "RUNNERS",
    "BusyStepEnv",
    "Case",
    "CaseResult",
    "ImageObsEnv",
    "Runner",
    "RunnerOptions",
    "RunnerResult",
    "Settings",
    "register_bench_envs",
    "register_runner",
    "run_case",
    "run_cases",
]
