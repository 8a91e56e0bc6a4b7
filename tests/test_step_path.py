"""The step path stays short: gymvec function calls per step in the calling process.

One face step (``ParallelVectorEnv``, 8 CartPoles, 2 workers, the local share, NEXT_STEP) and
one tensordict ``ParallelEnv.step_and_maybe_reset`` (2 workers of 4), counted with cProfile
over 200 steps after a warm-up: every call of a function whose file is under ``gymvec/``.
The limits are the figures ``docs/architecture.md`` prints beside the hop lists (``runs at
most N``), read from there, so the doc and the test cannot drift apart.
"""

from __future__ import annotations

import cProfile
import pstats
import re
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import gymvec

ROOT = Path(gymvec.__file__).resolve().parent
DOC = ROOT.parent / "docs" / "architecture.md"
STEPS = 200


def doc_limit(path: str) -> float:
    """The limit the doc prints for ``path`` ("face" or "tensordict")."""
    found = re.search(rf"<!-- step-path {path} -->[\s\S]*?runs at most (\d+)", DOC.read_text())
    assert found, f"docs/architecture.md prints no limit for the {path} step path"
    return float(found.group(1))


def calls_per_step(step: Callable[[], object], before: Callable[[], object] = int) -> float:
    """The gymvec calls of ``step()`` (``before()`` runs ahead of each, uncounted)."""
    profile = cProfile.Profile()
    for _ in range(STEPS):
        before()
        profile.enable()
        step()
        profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(
        ncalls for (file, _, _), (_, ncalls, *_rest) in stats.items() if file.startswith(str(ROOT))
    )
    return calls / STEPS


def face_calls(receive_only: bool) -> float:
    """The calls of one face step (``receive_only``: of its receive half, from
    ``ParallelVectorEnv.receive`` to the results)."""
    from gymvec import ParallelVectorEnv

    env = ParallelVectorEnv([lambda: gym.make("CartPole-v1")] * 8, num_workers=2, local_worker=True)
    try:
        env.reset(seed=0)
        actions = iter(np.random.default_rng(0).integers(0, 2, size=(STEPS + 50, 8)))
        for _ in range(50):
            env.step(next(actions))
        if receive_only:
            step, before = (
                lambda: env._step_result(env.receive()),
                lambda: env.step_send(next(actions)),
            )
            return calls_per_step(step, before)
        return calls_per_step(lambda: env.step(next(actions)))
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_a_face_step_is_short() -> None:
    counted = face_calls(receive_only=False)
    assert counted <= doc_limit("face"), counted


@pytest.mark.timeout(120)
def test_a_face_receive_is_short() -> None:
    counted = face_calls(receive_only=True)
    assert counted <= doc_limit("face-receive"), counted


@pytest.mark.timeout(120)
def test_a_tensordict_step_is_short() -> None:
    pytest.importorskip("torch")
    from gymvec import GymEnv, ParallelEnv

    env = ParallelEnv(2, lambda: GymEnv("CartPole-v1"), envs_per_worker=4)
    try:
        env.set_seed(0)
        state = {"td": env.reset()}
        action = env.action_spec.rand()  # (sampled once: specs are gymvec's, not the step's)

        def step() -> None:
            td = state["td"]
            td["action"] = action
            _, state["td"] = env.step_and_maybe_reset(td)

        for _ in range(50):
            step()
        counted = calls_per_step(step)
    finally:
        env.close()
    assert counted <= doc_limit("tensordict"), counted


def test_the_limits_are_read() -> None:
    assert 0 < doc_limit("face-receive") < doc_limit("face") <= doc_limit("tensordict")
