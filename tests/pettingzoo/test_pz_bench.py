"""The PettingZoo bench cases run (tiny settings) and their verdict reads as it should."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")

from gymvec.bench import CASES, Settings  # noqa: E402
from gymvec.bench.harness import run_case  # noqa: E402
from gymvec.bench.reporting.progress import Progress  # noqa: E402
from gymvec.bench.reporting.verdict import verdict_lines  # noqa: E402

TINY = Settings(steps=20, repeats=2, warmup=2, max_seconds=0.3)


def _run(backends: tuple[str, ...]):
    case = dataclasses.replace(CASES["pz-simple-spread-8"], backends=backends)
    return run_case(case, TINY, Progress(0, enabled=False))


def test_pz_runners_time_agent_steps(no_leaks):
    result = _run(("pz-supersuit", "pz-plain", "pz-block", "pz-loop"))
    for runner in result.results:
        assert runner.error is None, runner
        assert len(runner.samples) == 2 and runner.steps_per_s > 0
    assert any(line.startswith("PettingZooBlock: ") for line in verdict_lines([result]))


def test_pz_gymvec_runner_against_supersuit_and_the_plain_loop(no_leaks):
    result = _run(("pz-supersuit", "pz-plain", "pz-gymvec"))
    assert all(runner.error is None for runner in result.results), result.results
    line = next(line for line in verdict_lines([result]) if line.startswith("gymvec.pettingzoo"))
    assert "x SuperSuit's concat_vec_envs_v1" in line and "of the plain two-process loop" in line
