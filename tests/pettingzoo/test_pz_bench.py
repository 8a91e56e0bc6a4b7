"""The PettingZoo bench cases run (tiny settings), beside SyncVectorEnv, and their verdict
names its case and references."""

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
    result = _run(("pz-gym-sync", "pz-supersuit", "pz-plain", "pz-block", "pz-loop"))
    for runner in result.results:
        assert runner.error is None, runner
        assert len(runner.samples) == 2 and runner.steps_per_s > 0
        assert runner.ratio_sync is not None
    (line,) = verdict_lines([result], TINY)
    assert line.startswith("pz-simple-spread-8, PettingZooBlock (pz-block, ")
    assert "x SyncVectorEnv (pz-gym-sync); " in " ".join(line.split())


def test_pz_gymvec_runner_against_sync_supersuit_and_the_plain_loop(no_leaks):
    result = _run(("pz-gym-sync", "pz-supersuit", "pz-plain", "pz-gymvec"))
    assert all(runner.error is None for runner in result.results), result.results
    (line,) = (" ".join(line.split()) for line in verdict_lines([result], TINY))
    assert line.startswith("pz-simple-spread-8, gymvec.pettingzoo.make_vec (pz-gymvec, ")
    assert "x SyncVectorEnv (pz-gym-sync); " in line
    assert "x SuperSuit's concat_vec_envs_v1 (pz-supersuit)" in line
    assert "x the plain two-process loop (pz-plain)" in line


def test_pz_gym_sync_steps_every_agent_of_every_env():
    """pz-gym-sync's sub-env: all agents of a parallel env as one gymnasium env."""
    import gymnasium as gym

    from gymvec.bench.runners.pettingzoo import AgentsEnv, simple_spread

    envs = gym.vector.SyncVectorEnv([lambda: AgentsEnv(simple_spread)] * 2)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 3, 18) and envs.action_space.shape == (2, 3)
    ended = 0
    for _ in range(26):  # simple_spread truncates after 25 cycles
        obs, rewards, terminated, truncated, _ = envs.step(envs.action_space.sample())
        assert obs.shape == (2, 3, 18) and rewards.shape == (2,)
        ended += int(truncated.sum())
    assert ended == 2 and not terminated.any()
    envs.close()
