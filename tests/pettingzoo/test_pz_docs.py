"""docs/integrations.md's PettingZoo section runs as a user would run it (a script file)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")
pytest.importorskip("stable_baselines3")

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## PettingZoo (multi-agent)\n"


def _python_block() -> str:
    text = (ROOT / "docs" / "integrations.md").read_text()
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.search(r"^```python\n(.*?)^```$", body, re.S | re.M).group(1)


def test_integrations_section_runs(tmp_path):
    script = tmp_path / "pettingzoo_sb3.py"
    script.write_text(_python_block())
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[(0, 'agent_0'), (0, 'agent_1'), (0, 'agent_2'), (1, 'agent_0')]" in result.stdout
    assert re.search(r"trained \d+ agent-steps on 12 rows", result.stdout)
