"""What the bench's figures mean, in words: the legend printed above the table, and the verdict
printed below it (each gymvec runner of each case against the case's SyncVectorEnv, its
framework-free reference and its rivals, with the noise of the runs; and a warning when the
machine leaves parallel runners no room to win).

Every ratio here is the ratio of two medians of the table's steps/s column, the ones it prints.
A verdict calls a runner faster or slower than another only where every timed run of one beat
every run of the other; where their runs overlap, it says "within noise". A runner above a
reference that should bound it says whether the runs overlap (a noisy run) or not (the
reference is wrong here). A run of fewer than ``NOISE_STEPS`` vector steps (``--quick``) judges
nothing: its figures are noise.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from gymvec.bench.harness import CEILING, CaseResult, RunnerResult, Settings, ratio

# bare-free at or below this many times SyncVectorEnv: no parallel headroom on this machine
HEADROOM = 1.1
WIDTH = 100  # of the printed lines
# Timed runs shorter than this many vector steps (--quick's 20) measure start-up and timer
# noise, not speed.
NOISE_STEPS = 200

LEGEND = """\
How to read the table:
  steps/s      env-steps per second, the median of the timed runs of that runner.
  spread       how far those runs disagree: (fastest - slowest) / median. Two runners whose
               runs overlap are not told apart by this run.
  x sync       steps/s over the case's SyncVectorEnv's steps/s (gym-sync; atari-gym-sync and
               pz-gym-sync in the Atari and PettingZoo cases): the ratio of the two medians
               printed, as every ratio of the table and of the verdict.
  x best gym   the same over the faster of the case's gymnasium runners (with AsyncVectorEnv).
  x ceiling    the same over bare-free, what the machine gives this split of sub-envs at
               all; above 1 (gym-sync 1.6, say): the parallel ceiling is below one core.
  bare-* rows  framework-free references, not vectorizers: bare-loop steps the sub-envs in a
               plain loop (one core); bare-parallel is gymvec's parallel layout and waits with
               nothing else in it (the lock-step loop to match); bare-free is bare-parallel
               whose processes do not wait for each other (no lock-step runner can be
               faster); bare-first-ready is the reference of first-ready batches."""


@dataclass(frozen=True)
class Against:
    """A runner a verdict measures another against: a bound (a reference it should not beat)
    or a rival; ``note`` says what the comparison means where the label alone would not."""

    runner: str
    label: str
    bound: bool = False
    note: str = ""


# What each runner is, in the words of a verdict.
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
    "atari-gymvec": "gymvec.atari",
    "atari-ale-vector": "ALE's AtariVectorEnv",
}
_LOCK_STEP = Against("bare-parallel", "the framework-free lock-step loop", bound=True)
_CEILING = Against(CEILING, "the ceiling", bound=True)
_EMULATOR = Against("atari-emulator", "the emulator driven from Python", bound=True)
_EMULATOR_RESIZE = Against(
    "atari-emulator-resize", "the emulator and the resize driven from Python", bound=True
)
_NOT_ALES_BOUND = (
    "this and the next bound Python-driven vectorizers only: ALE's C++ threads make no Python call"
)
# Per gymvec runner (and ALE's, against gymvec.atari's bounds): what its verdict compares.
COMPARISONS: dict[str, tuple[Against, ...]] = {
    "gymvec-serial": (Against("bare-loop", "the framework-free loop", bound=True),),
    "gymvec-parallel": (_LOCK_STEP, _CEILING),
    "gymvec-td": (_LOCK_STEP, _CEILING),
    "gymvec-sb3": (_LOCK_STEP, _CEILING),
    "gymvec-first-ready": (
        Against("bare-first-ready", "the framework-free first-ready pool", bound=True),
    ),
    "gymvec-blocks": (
        Against("bare-blocks", "the framework-free lock-step blocks", bound=True),
        Against("vector-entry-point", "the vector env alone in one process"),
        Against("envpool", "envpool"),
        Against("bare-blocks-free", "the same blocks with no lock-step, the ceiling", bound=True),
    ),
    "pz-gymvec": (
        Against("pz-plain", "the plain two-process loop", bound=True),
        Against("pz-supersuit", "SuperSuit's concat_vec_envs_v1"),
    ),
    "pz-block": (Against("pz-loop", "the plain one-process loop", bound=True),),
    "atari-gymvec": (
        Against("atari-ale-vector", "ALE's AtariVectorEnv"),
        Against("atari-envpool", "envpool"),
        _EMULATOR,
        _EMULATOR_RESIZE,
    ),
    "atari-ale-vector": (
        Against(_EMULATOR.runner, _EMULATOR.label, note=_NOT_ALES_BOUND),
        Against(_EMULATOR_RESIZE.runner, _EMULATOR_RESIZE.label),  # (the note said once)
    ),
}


def is_noise(settings: Settings) -> bool:
    """Whether the runs are too short for any verdict on speed (``--quick``)."""
    return settings.steps < NOISE_STEPS


def verdict_header(settings: Settings) -> str:
    """The line that opens the verdict."""
    if is_noise(settings):
        return wrap(
            f"Verdict (quick run, {settings.steps} vector steps a timed run: the figures are "
            "noise, so nothing below is called faster, slower or beaten; rerun without --quick "
            "to compare):"
        )
    return "Verdict:"


def no_headroom(case_result: CaseResult) -> float | None:
    """bare-free's speed against gym-sync where it is not clearly above 1 (the machine gives
    the parallel layout nothing over one core: busy, or too few cores), else None."""
    free = _timed(case_result, CEILING)
    if free is None or free.ratio_sync is None:
        return None
    return free.ratio_sync if free.ratio_sync <= HEADROOM else None


def verdict_lines(case_results: Sequence[CaseResult], settings: Settings) -> list[str]:
    """One (wrapped) line per gymvec runner that was timed, after the case's headroom warning;
    judgements of speed only where the runs are long enough (see ``is_noise``)."""
    noise = is_noise(settings)
    lines = []
    for case_result in case_results:
        free = no_headroom(case_result)
        if free is not None and not noise:
            warning = (
                f"WARNING {case_result.case.name}: no parallel headroom on this machine now: "
                f"even bare-free, the ceiling of any parallel runner, reaches only {free:.2f}x "
                "SyncVectorEnv (other programs hold the cores, or there are too few). Parallel "
                "runners cannot beat SyncVectorEnv here; rerun on an idle machine, or use "
                "SerialVectorEnv."
            )
            lines.append(wrap(warning))
        for result in case_result.results:
            line = runner_verdict(case_result, result, noise)
            if line:
                lines.append(wrap(line))
    return lines


def wrap(text: str) -> str:
    """``text`` in lines of at most ``WIDTH``, the later ones indented (runner names whole)."""
    return textwrap.fill(text, width=WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def runner_verdict(case_result: CaseResult, result: RunnerResult, noise: bool) -> str | None:
    """``case, Name (runner, steps/s, spread): ratio x SyncVectorEnv (its runner); ratio x
    reference (its runner), judgement; ...``, or None for a runner with no verdict."""
    what = NAMES.get(result.runner)
    sync_name = case_result.case.sync_runner
    if what is None or result.runner == sync_name or result.steps_per_s is None:
        return None
    head = f"{case_result.case.name}, {what} ({result.runner}, {_rate(result)})"
    parts = []
    if result.ratio_sync is not None:
        parts.append(f"{result.ratio_sync:.2f}x SyncVectorEnv ({sync_name})")
    for against in COMPARISONS.get(result.runner, ()):
        other = _timed(case_result, against.runner)
        if other is None:
            continue
        value = ratio(result, [other])
        part = f"{value:.2f}x {against.label} ({against.runner}"
        part += f"; {against.note})" if against.note else ")"
        judgement = "" if noise else _judge(result, other, against.bound)
        parts.append(f"{part}{': ' if judgement else ''}{judgement}")
    if not parts:
        return None
    return f"{head}: {'; '.join(parts)}"


def _rate(result: RunnerResult) -> str:
    spread = result.spread
    runs = "one run" if spread is None else f"spread {spread:.0%}"
    return f"{result.steps_per_s:,.0f} steps/s, {runs}"


def _judge(result: RunnerResult, other: RunnerResult, bound: bool) -> str:
    """Faster, slower or within noise (the runs overlap); above a bound: beaten within noise
    (a noisy run) or beyond it (the reference is wrong here)."""
    faster = ratio(result, [other]) > 1
    if bound and not faster:
        return ""
    if len(result.samples) < 2 or len(other.samples) < 2:
        overlap: bool | None = None
    elif faster:
        overlap = min(result.samples) <= max(other.samples)
    else:
        overlap = max(result.samples) >= min(other.samples)
    spreads = f"spreads {result.spread or 0:.0%} and {other.spread or 0:.0%}"
    if bound:
        if overlap is None:
            return "above its reference in one run: the noise is unknown, rerun with --repeats 3"
        if overlap:
            return f"reference beaten within noise, a noisy run (the runs overlap, {spreads})"
        return (
            f"REFERENCE BEATEN beyond noise (every run above every run of {other.runner}): "
            "the reference is wrong here"
        )
    if overlap is None:
        return "one run each: the noise is unknown"
    if overlap:
        return f"within noise (the runs overlap, {spreads})"
    return "faster" if faster else "slower"


def _timed(case_result: CaseResult, runner: str) -> RunnerResult | None:
    for result in case_result.results:
        if result.runner == runner and result.samples:
            return result
    return None
