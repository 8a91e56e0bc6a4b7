"""Timing: build every runner of a case, step them in turn each repeat, keep the medians.

Interleaving the runners (rather than timing one runner's repeats back to back) spreads the
noise of a shared machine over all of them alike. Every ratio the bench prints, in the table
and in the verdict, is the ratio of two printed medians, and each runner's spread (its fastest
run less its slowest, over its median) says how far its median could move on a rerun.
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gymnasium.vector.utils import batch_space

from gymvec.bench.cases import Case
from gymvec.bench.reporting.progress import Progress
from gymvec.bench.resources import process_tree_mb
from gymvec.bench.runners import ACTION_SPACES, RUNNERS, Runner, RunnerOptions, make_env

# What the machine gives the case's split with no lock-step at all (see runners.bare).
CEILING = "bare-free"


@dataclass(frozen=True)
class Settings:
    steps: int = 2000
    repeats: int = 5
    warmup: int = 20
    # Cap on one timed run, so slow runners do not stretch the whole bench.
    max_seconds: float | None = 1.0
    seed: int = 0
    action_pool: int = 64


@dataclass
class RunnerResult:
    runner: str
    samples: list[float] = field(default_factory=list)
    error: str | None = None
    ratio_sync: float | None = None
    ratio_best_gym: float | None = None
    ratio_ceiling: float | None = None
    # what building the runner added to this process and its children (PSS, MB)
    memory_mb: float | None = None

    @property
    def steps_per_s(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def spread(self) -> float | None:
        """(fastest run - slowest run) / median: how much the runs of this runner disagree;
        None with fewer than two runs."""
        if len(self.samples) < 2:
            return None
        return (max(self.samples) - min(self.samples)) / statistics.median(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runner": self.runner,
            "steps_per_s": self.steps_per_s,
            "spread": self.spread,
            "ratio_sync": self.ratio_sync,
            "ratio_best_gym": self.ratio_best_gym,
            "ratio_ceiling": self.ratio_ceiling,
            "memory_mb": self.memory_mb,
            "error": self.error,
            "samples": list(self.samples),
        }


@dataclass
class CaseResult:
    case: Case
    results: list[RunnerResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "env_id": self.case.env_id,
            "num_envs": self.case.num_envs,
            "num_workers": self.case.num_workers,
            "envs_per_worker": self.case.envs_per_worker,
            "results": [r.to_dict() for r in self.results],
        }


def describe_error(error: BaseException) -> str:
    """One line: the exception type and the first line of its message."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def action_pool(env_id: str, num_envs: int, settings: Settings) -> list[Any]:
    """Seeded random batched actions, drawn once so sampling stays out of the timed loop."""
    if env_id in ACTION_SPACES:
        space = batch_space(ACTION_SPACES[env_id](), num_envs)
    else:
        env = make_env(env_id)
        try:
            space = batch_space(env.action_space, num_envs)
        finally:
            env.close()
    space.seed(settings.seed)
    return [space.sample() for _ in range(settings.action_pool)]


def time_runner(runner: Runner, actions: Sequence[Any], num_envs: int, settings: Settings) -> float:
    """Env-steps per second over one timed run, after a few untimed warm-up steps."""
    step = runner.step
    cycle = itertools.cycle(actions)
    env_steps = runner.env_steps or num_envs
    # Vector steps one call makes (a collector's batch makes many): warm-up and the step
    # budget count vector steps, at least one per call.
    per_call = max(1, env_steps // num_envs)
    for _ in range(math.ceil(settings.warmup / per_call)):
        step(next(cycle))
    gc.collect()
    budget = math.inf if settings.max_seconds is None else settings.max_seconds
    calls = 0
    start = time.perf_counter()
    while calls * per_call < settings.steps:
        step(next(cycle))
        calls += 1
        if time.perf_counter() - start >= budget:
            break
    elapsed = time.perf_counter() - start
    return env_steps * calls / elapsed


def _close(runner: Runner, result: RunnerResult) -> None:
    try:
        runner.close()
    except Exception as e:
        if result.error is None:
            result.error = f"close failed: {describe_error(e)}"


def run_case(case: Case, settings: Settings, progress: Progress) -> CaseResult:
    """Build each runner of ``case`` once, time them in turn ``settings.repeats`` times."""
    names = case.runner_names()
    results = {name: RunnerResult(name) for name in names}
    runners: dict[str, Runner] = {}
    prepared: dict[str, list[Any]] = {}
    options = RunnerOptions(case.num_workers, case.envs_per_worker)
    try:
        try:
            pool = action_pool(case.env_id, case.num_envs, settings)
        except Exception as e:
            pool = None
            for result in results.values():
                result.error = f"env failed: {describe_error(e)}"
        for name in names:
            progress.describe(f"{case.name} {name} build")
            if pool is not None:
                runner = None
                before = process_tree_mb()
                try:
                    factory = RUNNERS.get(name)
                    if factory is None:
                        raise ValueError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}")
                    runner = factory(case.env_id, case.num_envs, options)
                    runners[name] = runner
                    runner.reset(settings.seed)
                    prepared[name] = runner.prepare_actions(pool)
                    after = process_tree_mb()
                    if before is not None and after is not None:
                        results[name].memory_mb = after - before
                except Exception as e:
                    results[name].error = describe_error(e)
                    runners.pop(name, None)
                    if runner is not None:
                        _close(runner, results[name])
            progress.update()
        for repeat in range(settings.repeats):
            for name in names:
                progress.describe(f"{case.name} {name} {repeat + 1}/{settings.repeats}")
                runner = runners.get(name)
                if runner is not None:
                    try:
                        rate = time_runner(runner, prepared[name], case.num_envs, settings)
                        results[name].samples.append(rate)
                    except Exception as e:
                        results[name].error = describe_error(e)
                        # A runner that failed once is not timed again.
                        del runners[name]
                        _close(runner, results[name])
                progress.update()
    finally:
        for name, runner in runners.items():
            _close(runner, results[name])
    case_result = CaseResult(case, [results[name] for name in names])
    add_ratios(case_result)
    return case_result


def add_ratios(case_result: CaseResult) -> None:
    """Each timed runner against the case's SyncVectorEnv, against the faster of its
    gymnasium runners and against the ceiling (bare-free), those that ran: ratios of the
    medians, the very figures of the table's steps/s column."""
    timed = {r.runner: r for r in case_result.results if r.samples}
    sync = timed.get(case_result.case.sync_runner)
    gyms = [timed[name] for name in case_result.case.gym_runners if name in timed]
    ceiling = timed.get(CEILING)
    for result in timed.values():
        result.ratio_sync = ratio(result, [sync]) if sync else None
        result.ratio_best_gym = ratio(result, gyms) if gyms else None
        result.ratio_ceiling = ratio(result, [ceiling]) if ceiling else None


def ratio(result: RunnerResult, references: Sequence[RunnerResult]) -> float:
    """``result``'s median steps/s over the fastest median of ``references`` (all timed)."""
    return median_rate(result) / max(median_rate(ref) for ref in references)


def median_rate(result: RunnerResult) -> float:
    """The median steps/s of a runner that was timed."""
    rate = result.steps_per_s
    if rate is None:
        raise ValueError(f"runner {result.runner!r}: expected timed runs, got none")
    return rate


def run_cases(
    cases: Sequence[Case], settings: Settings, show_progress: bool = True
) -> list[CaseResult]:
    total = sum(len(case.runner_names()) * (1 + settings.repeats) for case in cases)
    progress = Progress(total, enabled=show_progress)
    try:
        return [run_case(case, settings, progress) for case in cases]
    finally:
        progress.close()
