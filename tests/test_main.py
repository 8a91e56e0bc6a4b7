"""``python -m gymvec``: the report block and its self-check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym

import gymvec.__main__ as gymvec_main

REPO = Path(__file__).resolve().parents[1]


def test_python_m_gymvec_prints_versions_and_passes():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "gymvec"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for name in ("gymvec", "python", "gymnasium", "numpy", "torch", "tensordict", "cores", "start"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert "SerialVectorEnv" in out and "ParallelVectorEnv" in out
    assert re.search(r"a sub-env restarted\s+PASS", out), out
    assert out.strip().splitlines()[-1].startswith("PASS")


def test_a_vector_env_that_differs_from_sync_fails_the_check():
    def doubled(fns):
        return gym.wrappers.vector.TransformReward(gym.vector.SyncVectorEnv(fns), lambda r: 2 * r)

    problem = gymvec_main.check_against_sync("doubled", doubled)
    assert problem == "doubled step 0: rewards differ from SyncVectorEnv's"
    assert gymvec_main.check_against_sync("sync", gym.vector.SyncVectorEnv) is None


def test_a_failed_check_exits_non_zero(monkeypatch, capsys):
    monkeypatch.setattr(gymvec_main, "self_check", lambda: [("broken", "broken: it raised")])
    assert gymvec_main.main() == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("FAIL")


def test_a_restart_that_does_not_heal_fails_the_check(monkeypatch):
    # without on_fault the sub-env's error ends the run: the check says so
    monkeypatch.setattr(
        gymvec_main.gymvec, "ParallelVectorEnv", lambda fns, **_: gym.vector.SyncVectorEnv(fns)
    )
    results = dict(gymvec_main.self_check())
    assert "RuntimeError" in results["a sub-env restarted"]
    assert "the self-check's sub-env raises once" in results["a sub-env restarted"]
