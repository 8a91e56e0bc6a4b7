"""The examples in gymvec's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import pathlib

import pytest

import gymvec

PACKAGE = pathlib.Path(gymvec.__file__).parent
MODULES = sorted(
    ".".join(("gymvec", *path.relative_to(PACKAGE).with_suffix("").parts))
    for path in PACKAGE.rglob("*.py")
    if ">>> " in path.read_text()
)
# gymvec.torchrl needs torchrl (an optional extra): tests/integrations/test_torchrl.py runs
# its examples.
MODULES = [name for name in MODULES if not name.startswith("gymvec.torchrl")]


def test_the_examples_were_found():
    assert "gymvec.envs.parallel_env" in MODULES and "gymvec.vector.vector_env" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
