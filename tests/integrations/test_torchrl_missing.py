"""Without torchrl: ``gymvec.torchrl`` says how to install it, and nothing else in gymvec
imports torchrl (each check in a fresh interpreter, whether or not torchrl is installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.timeout(150)
def test_import_without_torchrl_says_how_to_install_it():
    # sys.modules[name] = None makes `import name` fail as if it were not installed
    result = run_python(
        "import sys\n"
        "sys.modules['torchrl'] = None\n"
        "try:\n"
        "    import gymvec.torchrl\n"
        "except ImportError as error:\n"
        "    print('ImportError:', error)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install torchrl" in result.stdout


@pytest.mark.timeout(150)
def test_gymvec_imports_no_torchrl():
    result = run_python(
        "import sys, gymnasium as gym\n"
        "import gymvec, gymvec.sb3, gymvec.bench.__main__\n"
        "env = gymvec.GymnasiumVectorEnv(gymvec.SerialEnv(2, lambda: gym.make('CartPole-v1')))\n"
        "env.reset(seed=0)\n"
        "env.step(env.action_space.sample())\n"
        "env.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torchrl'))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
