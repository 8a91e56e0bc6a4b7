"""The user-facing text: the README stays under its size limit, examples/README.md lists every
example, and the snippets of docs/atari.md and docs/multi_agent.md start worker processes under
the main guard that the README asks for, and run as scripts."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_LIMIT = 15_000  # characters: the rest belongs in docs/
GUARD = 'if __name__ == "__main__":'


def test_readme_is_under_its_limit():
    size = len((ROOT / "README.md").read_text())
    assert size < README_LIMIT, f"README.md has {size} characters; move detail to docs/"


def test_examples_readme_lists_every_example():
    listed = set(re.findall(r"`([\w]+\.py)`", (ROOT / "examples" / "README.md").read_text()))
    examples = {path.name for path in (ROOT / "examples").glob("*.py")}
    assert examples <= listed, f"examples/README.md misses {sorted(examples - listed)}"


# doc -> the modules its snippets need
DOCS = {"atari.md": ("ale_py", "cv2"), "multi_agent.md": ("pettingzoo", "mpe2"), "faults.md": ()}


def _blocks(doc: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", (ROOT / "docs" / doc).read_text(), re.S | re.M)


def _snippets() -> list[tuple[str, int]]:
    return [(doc, k) for doc in DOCS for k in range(len(_blocks(doc)))]


@pytest.mark.parametrize(("doc", "k"), _snippets())
def test_snippets_that_start_workers_are_guarded(doc, k):
    block = _blocks(doc)[k]
    if re.search(r"\bmake_(vec|env)\(", block):
        assert GUARD in block, f"docs/{doc} block {k} starts workers without the main guard"


@pytest.mark.parametrize(
    ("doc", "k"), [(doc, k) for doc, k in _snippets() if GUARD in _blocks(doc)[k]]
)
def test_guarded_snippets_run_as_scripts(doc, k, tmp_path):
    missing = [m for m in DOCS[doc] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"docs/{doc} needs {missing}")
    script = tmp_path / f"snippet_{k}.py"
    script.write_text(_blocks(doc)[k])
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
