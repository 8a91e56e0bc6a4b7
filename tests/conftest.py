"""Shared fixtures: the test envs (registered at import) and process/shared-memory checks."""

from __future__ import annotations

import functools
import gc
import importlib.util
import multiprocessing
import os
import re
import subprocess
import sys

import _envs  # noqa: F401  (registers the test env ids)
import pytest

from gymvec.bench.resources import child_pids, open_fds, shm_entries  # noqa: F401


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a child process or a /dev/shm entry behind."""
    children, shm = child_pids(), shm_entries()
    yield
    gc.collect()
    multiprocessing.active_children()  # reap finished children
    assert child_pids() - children == set()
    assert shm_entries() - shm == set()


# ---- optional integrations -------------------------------------------------------------------
@functools.cache
def import_error(*modules: str) -> str | None:
    """Why ``modules`` do not import, or None when they do. A package can be found and still not
    import: ``ray.rllib`` ships with every ray, but needs ``ray[rllib]``'s dependencies. The
    imports run in a fresh interpreter, so that a failed or patching import leaves this one as
    it was; a package that is not installed is found missing without starting one."""
    missing = [m for m in modules if importlib.util.find_spec(m.partition(".")[0]) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    result = subprocess.run(
        [sys.executable, "-c", f"import {', '.join(modules)}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
        return f"import {', '.join(modules)}: {lines[-1]}"
    return None


# ---- tests in a fresh interpreter -------------------------------------------------------------
# Some packages patch global state when imported (rl_zoo3 replaces gymnasium's TimeLimit with one
# that adds info["TimeLimit.truncated"], which changes every env made after it). A test marked
# fresh_interpreter runs in a pytest of its own, so that nothing its imports change reaches the
# tests after it; its module imports such packages inside the tests only, never at collection.
FRESH_INTERPRETER = "GYMVEC_TEST_FRESH_INTERPRETER"  # set in that pytest: the test runs there


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "fresh_interpreter: run the test in a pytest of its own (its imports patch global state)",
    )


def pytest_collection_modifyitems(config, items):
    """A test in a fresh interpreter has its own timeout there; here, that pytest's start too."""
    if os.environ.get(FRESH_INTERPRETER):
        return
    for item in items:
        if item.get_closest_marker("fresh_interpreter") is None:
            continue
        marker = item.get_closest_marker("timeout")
        timeout = marker.args[0] if marker and marker.args else config.getoption("timeout", None)
        if timeout:
            item.add_marker(pytest.mark.timeout(float(timeout) + 120), append=False)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("fresh_interpreter") is None:
        return None
    if os.environ.get(FRESH_INTERPRETER):
        return None  # the fresh interpreter: run the test here
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    result = subprocess.run(
        command,
        cwd=pyfuncitem.config.rootpath,
        env={**os.environ, FRESH_INTERPRETER: "1"},
        capture_output=True,
        text=True,
    )
    # passed, not skipped or deselected: the test ran there
    if result.returncode != 0 or not re.search(r"\b1 passed\b", result.stdout):
        output = result.stdout[-6000:] + result.stderr[-2000:]
        pytest.fail(f"in a fresh interpreter (exit {result.returncode}):\n{output}", pytrace=False)
    return True


# ---- hypothesis profiles (the fuzz tests, test_fuzz.py) ---------------------------------------
# "ci" (the default): few examples, derandomized, so that CI is quick and reproducible, and
# no shrinking (every shrink step starts processes: a failure is reported as found);
# "dev": many more, a new random draw each run, failures shrunk, for a long run by hand:
#     GYMVEC_HYPOTHESIS_PROFILE=dev python -m pytest tests/differential/test_fuzz.py
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

_SLOW_EXAMPLES = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "ci",
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    print_blob=True,
    suppress_health_check=_SLOW_EXAMPLES,
)
settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_EXAMPLES,
)
settings.load_profile(os.environ.get("GYMVEC_HYPOTHESIS_PROFILE", "ci"))
