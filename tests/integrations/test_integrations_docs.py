"""docs/integrations.md runs: every ``python`` and ``bash`` block of each trainer's section, as a
user would run it (a script file, a shell), where that trainer is installed.

A section whose trainer does not import here is skipped, saying why: .ci/run's full-extras venv
runs the rl-zoo3, sb3-contrib and torchrl sections, its RLlib venv the RLlib section.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import import_error

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "integrations.md"
# Each section's trainer, by the modules its blocks import (None: a section whose blocks run
# elsewhere). A section missing here fails test_every_section_is_known.
REQUIRES: dict[str, tuple[str, ...] | None] = {
    "SB3": ("stable_baselines3",),
    "rl-zoo3": ("rl_zoo3",),
    "sb3-contrib": ("sb3_contrib",),
    "tianshou": None,  # tests/integrations/test_tianshou.py runs its block
    "RLlib": ("ray.rllib",),
    "CleanRL": (),
    "PettingZoo (multi-agent)": None,  # tests/pettingzoo/test_pz_docs.py runs its block
    "torchrl": ("torchrl",),
    "gymnasium.make_vec": (),
}
RUNNERS = {"python": [sys.executable], "bash": ["bash", "-euo", "pipefail"]}
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def sections() -> dict[str, list[tuple[str, str]]]:
    """Each ``## `` section's (language, code) blocks."""
    found: dict[str, list[tuple[str, str]]] = {}
    for part in re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        found[title.strip()] = [(lang, code) for lang, code in BLOCK.findall(body)]
    return found


def test_every_section_is_known():
    assert set(sections()) == set(REQUIRES)
    for title, blocks in sections().items():
        if REQUIRES[title] is not None:
            assert any(lang in RUNNERS for lang, _ in blocks), f"{title}: no block to run"


@pytest.mark.parametrize("title", [t for t, r in REQUIRES.items() if r is not None])
def test_section_blocks_run(title, tmp_path):
    error = import_error(*REQUIRES[title]) if REQUIRES[title] else None
    if error:
        pytest.skip(f"{title}: {error}")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ran = 0
    for index, (lang, code) in enumerate(sections()[title]):
        if lang not in RUNNERS:
            continue  # diffs: the lines to change, not a program
        if lang == "bash":  # installing is CI's job; the other lines run as typed
            code = "\n".join(line for line in code.splitlines() if not line.startswith("pip "))
            code = code.replace("python ", f"{sys.executable} ")
        script = tmp_path / f"block{index}.{'py' if lang == 'python' else 'sh'}"
        script.write_text(code)
        result = subprocess.run(
            [*RUNNERS[lang], str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
        )
        assert result.returncode == 0, f"{title} block {index}:\n{result.stderr[-4000:]}"
        ran += 1
    assert ran > 0
