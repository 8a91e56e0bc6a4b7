"""Shared fixtures: the test envs (registered at import) and process/shared-memory checks."""

from __future__ import annotations

import gc
import multiprocessing
import os

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
