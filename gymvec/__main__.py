"""``python -m gymvec``: the versions and the machine, then a few-second self-check.

The block to paste into a bug report. The self-check steps a ``SerialVectorEnv`` and a
``ParallelVectorEnv`` beside gymnasium's ``SyncVectorEnv`` (same seeds, same actions), and a
``ParallelVectorEnv`` with ``on_fault="restart"`` whose one sub-env raises once (the other rows
against ``SyncVectorEnv``), and prints PASS or FAIL; the exit code is 1 on FAIL.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import multiprocessing
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import gymvec
from gymvec.backends.processes.executor import default_start_method
from gymvec.common.cores import usable_cores
from gymvec.layout.cache import cache_dir, enabled

PACKAGES = ("gymnasium", "numpy", "torch", "tensordict")
CHECK_ENV_ID = "CartPole-v1"
CHECK_NUM_ENVS = 4
CHECK_STEPS = 300  # a few episodes end: autoresets are compared too


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report_lines() -> list[str]:
    """gymvec's version and where it was imported from, the packages, the machine."""
    lines = [
        f"gymvec      {gymvec.__version__} ({gymvec.__path__[0]})",
        f"python      {platform.python_version()} ({sys.executable})",
    ]
    lines += [f"{package:<11} {_version(package)}" for package in PACKAGES]
    lines += [
        f"platform    {platform.platform()}",
        f"cores       {usable_cores()} usable of {multiprocessing.cpu_count()}",
        f"start       {default_start_method()} (the worker processes' default start method)",
        f"cache       {cache_dir()} (backend='auto' layouts"
        + ("" if enabled() else "; off: GYMVEC_CACHE=0")
        + ")",
    ]
    return lines


def _mismatch(name: str, got: Sequence, expected: Sequence) -> str | None:
    """What differs between one step's outputs (obs, rewards, terminated, truncated)."""
    names = ("observations", "rewards", "terminations", "truncations")
    for what, a, b in zip(names, got, expected):
        if not np.array_equal(np.asarray(a), np.asarray(b)):
            return f"{name}: {what} differ from SyncVectorEnv's"
    return None


def check_against_sync(name: str, make: Callable[[list], gym.vector.VectorEnv]) -> str | None:
    """Step ``make(env_fns)`` and ``SyncVectorEnv(env_fns)`` alike; the first difference."""
    env_fns = [lambda: gym.make(CHECK_ENV_ID)] * CHECK_NUM_ENVS
    reference = gym.vector.SyncVectorEnv(env_fns)
    envs = make(env_fns)
    try:
        actions = np.random.default_rng(0).integers(0, 2, size=(CHECK_STEPS, CHECK_NUM_ENVS))
        obs, _ = envs.reset(seed=7)
        expected_obs, _ = reference.reset(seed=7)
        problem = _mismatch(f"{name} reset", (obs, [], [], []), (expected_obs, [], [], []))
        for t, action in enumerate(actions):
            if problem:
                return problem
            got, expected = envs.step(action), reference.step(action)
            problem = _mismatch(f"{name} step {t}", got[:4], expected[:4])
        return problem
    finally:
        envs.close()
        reference.close()


class RaisesOnce(gym.Wrapper):
    """CartPole that raises in the 5th step after a reset seeded with ``seed``: once in a
    run, since its rebuilt self is seeded otherwise (``gymvec.common.faults.restart_seed``)."""

    def __init__(self, seed: int):
        super().__init__(gym.make(CHECK_ENV_ID))
        self.seed, self.countdown = seed, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        self.countdown = 5 if seed == self.seed else 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple:
        self.countdown -= 1
        if self.countdown == 0:
            raise RuntimeError("the self-check's sub-env raises once")
        return self.env.step(action)


def check_restart(seed: int = 7, row: int = 1) -> str | None:
    """Sub-env ``row`` raises once in its 5th step, in a ``ParallelVectorEnv`` with
    ``on_fault="restart"``: that step truncates it with ``infos["fault"]``, it is restarted
    once, and every other row matches ``SyncVectorEnv`` step for step."""
    fns: list[Callable[[], gym.Env]] = [lambda: gym.make(CHECK_ENV_ID)] * CHECK_NUM_ENVS
    reference = gym.vector.SyncVectorEnv(fns)
    fns[row] = functools.partial(RaisesOnce, seed + row)
    envs = gymvec.ParallelVectorEnv(fns, num_workers=2, on_fault="restart")
    others = np.arange(CHECK_NUM_ENVS) != row
    logger = logging.getLogger("gymvec")
    level = logger.level
    logger.setLevel(logging.ERROR)  # (the restart's WARNING is expected here)
    try:
        actions = np.random.default_rng(0).integers(0, 2, size=(CHECK_STEPS, CHECK_NUM_ENVS))
        obs, _ = envs.reset(seed=seed)
        expected_obs, _ = reference.reset(seed=seed)
        problem = _mismatch("restart reset", (obs, [], [], []), (expected_obs, [], [], []))
        for t, action in enumerate(actions):
            if problem:
                return problem
            *got, infos = envs.step(action)
            expected = reference.step(action)[:4]
            problem = _mismatch(
                f"restart step {t}", [a[others] for a in got], [a[others] for a in expected]
            )
            if t == 4 and not ("fault" in infos and infos["_fault"][row] and got[3][row]):
                problem = f"restart step {t}: sub-env {row}'s fault is not a truncation"
        once = [int(i == row) for i in range(CHECK_NUM_ENVS)]
        if problem is None and envs.restarts.tolist() != once:
            problem = f"restarts: expected one of sub-env {row}, got {envs.restarts.tolist()}"
        return problem
    finally:
        logger.setLevel(level)
        envs.close()
        reference.close()


def self_check() -> list[tuple[str, str | None]]:
    """(what, None or what went wrong) of each check."""
    checks: dict[str, Callable[[], str | None]] = {
        "SerialVectorEnv": functools.partial(
            check_against_sync, "SerialVectorEnv", gymvec.SerialVectorEnv
        ),
        "ParallelVectorEnv (2 workers)": functools.partial(
            check_against_sync,
            "ParallelVectorEnv",
            lambda fns: gymvec.ParallelVectorEnv(fns, num_workers=2),
        ),
        "a sub-env restarted": check_restart,
    }
    results = []
    for name, check in checks.items():
        try:
            results.append((name, check()))
        except Exception as exc:  # a broken install shows as a FAIL with its reason
            results.append((name, f"{name} raised {type(exc).__name__}: {exc}"))
    return results


def main() -> int:
    print("\n".join(report_lines()))
    print(
        f"self-check: {CHECK_STEPS} steps of {CHECK_NUM_ENVS} {CHECK_ENV_ID} sub-envs, each "
        "vector env against gymnasium's SyncVectorEnv (same seeds and actions)"
    )
    start = time.perf_counter()
    results = self_check()
    for name, problem in results:
        print(f"  {name:<30} {'PASS' if problem is None else 'FAIL: ' + problem}")
    passed = all(problem is None for _, problem in results)
    print(f"{'PASS' if passed else 'FAIL'} ({time.perf_counter() - start:.1f} s)")
    return 0 if passed else 1


if __name__ == "__main__":  # guarded: spawned workers re-import the main module
    sys.exit(main())
