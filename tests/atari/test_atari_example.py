"""examples/atari_ppo.py runs, in its short ``--quick`` form, and prints its throughput."""

from __future__ import annotations

import pytest

pytest.importorskip("ale_py")  # gymvec[atari]: ale-py and opencv
pytest.importorskip("cv2")

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "atari_ppo.py"


def run(backend: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick", "--backend", backend],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def check(out: str, backend: str) -> None:
    # --quick: 4 envs x 16 steps, two rollouts
    assert re.search(r"^iteration 2/2 step 128 episodes 0 ", out, re.M), out
    assert re.search(rf"^backend {backend}: 128 steps, \d+ steps per second", out, re.M), out


@pytest.mark.timeout(150)
def test_atari_ppo_quick_sync():
    check(run("sync"), "sync")


@pytest.mark.timeout(150)
def test_atari_ppo_quick_gymvec():
    check(run("gymvec"), "gymvec")
