"""examples/multiagent_ppo.py runs in its --quick form (as tests/test_examples.py runs the
others), with one block in this process and over make_vec's workers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multiagent_ppo.py"


def _run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick", "--num-envs", "4", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _check(out: str) -> None:
    assert re.search(
        r"^agent-steps \d+ return \(last 30 agents\) -?\d+\.\d .*agent-steps/s$", out, re.M
    ), out
    trained = re.search(r"trained (\d+) agent-steps on 4 envs x 3 agents \(12 rows\)", out)
    assert trained and int(trained.group(1)) >= 2048, out


def test_multiagent_ppo_quick_in_process():
    _check(_run("--in-process"))


def test_multiagent_ppo_quick_make_vec():
    _check(_run("--num-workers", "2"))
