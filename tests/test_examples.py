"""The examples in ``examples/`` run, in their short ``--quick`` form, and print what they should.

Each runs as its own process, as a user would run it. Workers are forked where the example lets
us choose, so that they do not import torch again.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NUMBER = r"-?\d+(?:\.\d+)?"


def run_example(name: str, *args: str, timeout: float = 120.0) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{name} exited with {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result.stdout


@pytest.mark.timeout(150)
def test_sb3_ppo_cartpole_quick():
    out = run_example(
        "sb3_ppo_cartpole.py", "--num-envs", "8", "--num-workers", "2", "--start-method", "fork"
    )
    trained = re.search(r"trained (\d+) steps on 8 envs \(2 workers\)", out)
    assert trained, out
    assert int(trained.group(1)) >= 2048
    evaluation = re.search(rf"mean evaluation return over 2 episodes: ({NUMBER})", out)
    assert evaluation, out
    # An episode of CartPole-v1 lasts between 1 and 500 steps, one reward per step.
    assert 1.0 <= float(evaluation.group(1)) <= 500.0
    assert "quick run: no threshold" in out


@pytest.mark.timeout(150)
def test_ppo_gymnasium_quick():
    out = run_example("ppo_gymnasium.py", "--num-envs", "4", "--num-workers", "2")
    iterations = re.findall(r"^iteration (\d+)/(\d+) step (\d+) episodes (\d+)", out, re.M)
    # 2048 steps in rollouts of 4 envs x 32 steps: 16 iterations, logged every 10 and at the end
    # (and every 5 s at the latest, on a slow machine).
    logged = [(int(i), int(n), int(s)) for i, n, s, _ in iterations]
    assert (10, 16, 1280) in logged and logged[-1] == (16, 16, 2048), out
    assert logged == sorted(set(logged)), out
    # Early CartPole episodes last tens of steps: RecordEpisodeStatistics must have reported
    # some through the infos.
    assert int(iterations[-1][3]) > 0
    final = re.search(rf"mean episodic return of the last (\d+) episodes: ({NUMBER})", out)
    assert final, out
    assert 1 <= int(final.group(1)) <= 20
    assert 1.0 <= float(final.group(2)) <= 500.0
    assert "quick run: no threshold" in out


@pytest.mark.timeout(150)
def test_tensordict_rollout_quick():
    out = run_example("tensordict_rollout.py", "--start-method", "fork")
    assert "batch size (4,)" in out
    assert (
        "rollout: observation (4, 20, 4), action (4, 20), reward (4, 20, 1), done (4, 20, 1)" in out
    )
    # The lean policy balances the pole until CartPole-v1's 500-step limit: in 600 steps
    # each of the 4 sub-envs is truncated once, and reset by step_and_maybe_reset.
    assert (
        "step_and_maybe_reset: 600 steps x 4 envs, lean policy: 4 episodes ended, "
        "mean return 500.0" in out
    )


@pytest.mark.timeout(150)
def test_first_ready_quick():
    out = run_example("first_ready.py")
    ready = re.search(rf"first-ready \(batch_size=4 of 8\): 400 env-steps in ({NUMBER}) s", out)
    lock = re.search(rf"lock-step: 400 env-steps in ({NUMBER}) s", out)
    assert ready and lock, out
    assert float(ready.group(1)) > 0 and float(lock.group(1)) > 0
    # speed is the bench's business; here, that every sub-env got its share of steps and that
    # first-ready batches changed no trajectory
    lengths = re.search(r"transitions per sub-env: min (\d+), max (\d+)", out)
    assert lengths and int(lengths.group(1)) >= 10, out
    assert "every sub-env replayed alone: identical" in out


@pytest.mark.timeout(150)
def test_faults_quick():
    out = run_example("faults.py")
    restarts = re.search(r"restarts per sub-env: \[[\d, ]+\] \((\d+) in all\)", out)
    kinds = re.search(r"faults by kind: error (\d+), death (\d+), timeout 0", out)
    assert restarts and kinds, out
    # the quick run's seeded faults: sub-envs raise and workers die, and the run goes on
    assert int(restarts.group(1)) > 0 and int(kinds.group(1)) > 0 and int(kinds.group(2)) > 0
    assert "a rerun with the same seeds: identical" in out
