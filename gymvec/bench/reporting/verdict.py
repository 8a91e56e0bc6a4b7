"""What the bench's figures mean, in words: the legend printed above the table, and the verdict
printed below it (each gymvec runner against gymnasium and against its framework-free
reference, and a warning when the machine leaves parallel runners no room to win)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from gymvec.bench.harness import CEILING, GYM_SYNC, CaseResult, RunnerResult, paired_ratio
from gymvec.bench.runners.atari import atari_verdict

# bare-free at or below this many times SyncVectorEnv: no parallel headroom on this machine
HEADROOM = 1.1
WIDTH = 100  # of the printed lines

LEGEND = """\
How to read the table:
  steps/s      env-steps per second, the median of the timed runs of that runner.
  x sync       speed against gym-sync (gymnasium's SyncVectorEnv): the runners take turns,
               round after round, and this is the median of the ratios within each round.
               It follows the machine's load better than the ratio of the two steps/s
               medians, from which it can differ when the load changed during the run.
  x best gym   the same against the faster of gym-sync and gym-async (AsyncVectorEnv).
  x ceiling    the same against bare-free, what the machine gives this split of sub-envs
               at all; above 1 (gym-sync 1.6, say): the parallel ceiling is below one core.
  bare-* rows  framework-free references, not vectorizers: bare-loop steps the sub-envs in a
               plain loop (one core); bare-parallel is gymvec's parallel layout with nothing
               else in it (the lock-step loop to match); bare-free is bare-parallel whose
               processes do not wait for each other (no lock-step runner can be faster);
               bare-first-ready is the reference of first-ready batches."""

# What each runner is, in the words of a verdict; and the reference it should come close to.
NAMES = {
    "gym-sync": "SyncVectorEnv",
    "gym-async": "AsyncVectorEnv",
    "gymvec-serial": "SerialVectorEnv",
    "gymvec-parallel": "ParallelVectorEnv",
    "gymvec-td": "ParallelEnv",
    "gymvec-sb3": "SB3VecEnv(ParallelVectorEnv)",
    "gymvec-first-ready": "ParallelVectorEnv(batch_size=...)",
    "collector-gymvec": "torchrl's Collector over gymvec's ParallelEnv",
    "gymvec-ray": "RayEnv",
    "gymvec-blocks": "blocks (make_vec vectorization_mode='vector_entry_point')",
    "pz-gymvec": "gymvec.pettingzoo.make_vec",
    "pz-block": "PettingZooBlock",
}
REFERENCES = {
    "gymvec-serial": ("bare-loop", "the framework-free loop"),
    "gymvec-parallel": ("bare-parallel", "the framework-free lock-step loop"),
    "gymvec-td": ("bare-parallel", "the framework-free lock-step loop"),
    "gymvec-sb3": ("bare-parallel", "the framework-free lock-step loop"),
    "gymvec-first-ready": ("bare-first-ready", "the framework-free first-ready pool"),
    "gymvec-blocks": ("bare-blocks", "the framework-free lock-step blocks"),
    "pz-gymvec": ("pz-plain", "the plain two-process loop"),
    "pz-block": ("pz-loop", "the plain one-process loop"),
}
# Other vectorizers a runner's verdict measures it against, where they ran.
RIVALS = {
    "gymvec-blocks": (
        ("vector-entry-point", "the vector env alone in one process"),
        ("envpool", "envpool"),
        ("bare-blocks-free", "the same blocks with no lock-step at all, the ceiling"),
    ),
    "pz-gymvec": (("pz-supersuit", "SuperSuit's concat_vec_envs_v1"),),
}


def no_headroom(case_result: CaseResult) -> float | None:
    """bare-free's speed against gym-sync where it is not clearly above 1 (the machine gives
    the parallel layout nothing over one core: busy, or too few cores), else None."""
    free = _timed(case_result, CEILING)
    if free is None or free.ratio_sync is None:
        return None
    return free.ratio_sync if free.ratio_sync <= HEADROOM else None


def verdict_lines(case_results: Sequence[CaseResult]) -> list[str]:
    lines = []
    for case_result in case_results:
        name = case_result.case.name
        free = no_headroom(case_result)
        if free is not None:
            warning = (
                f"WARNING {name}: no parallel headroom on this machine now: even bare-free, "
                f"the ceiling of any parallel runner, reaches only {free:.2f}x SyncVectorEnv "
                "(other programs hold the cores, or there are too few). Parallel runners "
                "cannot beat SyncVectorEnv here; rerun on an idle machine, or use "
                "SerialVectorEnv."
            )
            lines.append(textwrap.fill(warning, width=WIDTH, subsequent_indent="  "))
        for result in case_result.results:
            line = _runner_verdict(case_result, result)
            if line:
                lines.append(line)
        if name == "atari-8":
            timed = {r.runner: r for r in case_result.results if r.samples}
            lines.extend(atari_verdict(timed, paired_ratio))
    return lines


def _runner_verdict(case_result: CaseResult, result: RunnerResult) -> str | None:
    what = NAMES.get(result.runner)
    if what is None or result.runner == GYM_SYNC or not result.samples:
        return None
    parts = []
    if result.ratio_sync is not None:
        parts.append(f"{result.ratio_sync:.2f}x SyncVectorEnv on {case_result.case.name}")
    reference = REFERENCES.get(result.runner)
    timed_reference = _timed(case_result, reference[0]) if reference else None
    if reference is not None and timed_reference is not None:
        ratio = paired_ratio(result, [timed_reference])
        parts.append(f"{ratio:.2f} of {reference[1]} ({reference[0]})")
    for rival, label in RIVALS.get(result.runner, ()):
        timed_rival = _timed(case_result, rival)
        if timed_rival is not None:
            ratio = paired_ratio(result, [timed_rival])
            parts.append(f"{ratio:.2f}x {label} ({'faster' if ratio >= 1 else 'slower'})")
    if not parts:
        return None
    return f"{what}: {', '.join(parts)}"


def _timed(case_result: CaseResult, runner: str) -> RunnerResult | None:
    for result in case_result.results:
        if result.runner == runner and result.samples:
            return result
    return None
