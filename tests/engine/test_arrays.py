"""The hot-path helpers of gymvec.common.arrays agree with plain numpy on every kind of input."""

import platform
import subprocess
import sys

import _envs
import numpy as np
import pytest

from gymvec import ParallelVectorEnv
from gymvec.common.arrays import all_below, all_set, any_set, below_check, copy_batch

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="glibc's dynamic mmap threshold"
)

INT64 = np.iinfo(np.int64)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 255, 256, 1000, 2**40 + 3, 2**62])
def test_all_below_matches_numpy(n):
    rng = np.random.default_rng(n % 1000)
    for _ in range(300):
        size = int(rng.integers(0, 40))
        if n < 2**40:
            values = rng.integers(-3, n + 3, size)
        else:
            values = rng.integers(-(2**62), 2**62, size)
        if rng.random() < 0.3:  # mostly valid batches, as a policy sends
            values = rng.integers(0, n, size)
        if size and rng.random() < 0.2:  # the extremes of int64
            values[rng.integers(size)] = rng.choice([INT64.min, INT64.max, -1, n, n - 1])
        values = values.astype(np.int64)
        expected = bool(((values >= 0) & (values < n)).all())
        assert all_below(values, n) == expected, (n, values)
        # the whole-batch check of that size (other sizes fall back to all_below)
        assert below_check(n, size)(values) == expected, (n, values)
        assert below_check(n, size + 1)(values) == expected, (n, values)


def test_all_below_large_and_strided_arrays():
    values = np.zeros(10_000, dtype=np.int64)  # past the big-int limit: numpy's reduction
    assert all_below(values, 1)
    values[-1] = 1
    assert not all_below(values, 1)
    grid = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert all_below(grid[:, 1], 10)  # a strided view: 1, 5, 9
    assert not all_below(grid[:, 3], 11)  # 3, 7, 11


def test_any_set():
    flags = np.zeros(37, dtype=bool)
    assert not any_set(flags)
    flags[36] = True
    assert any_set(flags)
    assert not any_set(np.zeros(0, dtype=bool))


def test_all_set():
    flags = np.ones(37, dtype=bool)
    assert all_set(flags)
    flags[36] = False
    assert not all_set(flags)
    assert all_set(np.ones((5, 3), dtype=bool)[:, 1])  # a column, as the infos' presence
    assert not all_set(np.ones(4, dtype=np.uint8))  # not bools: the caller's general path
    assert not all_set([True, True])


@pytest.mark.parametrize(
    "value",
    [
        np.arange(24, dtype=np.float32).reshape(4, 6).T,  # Fortran-ordered: column by column
        np.arange(24, dtype=np.float32).reshape(6, 4),  # C-ordered
        np.arange(6 * 20, dtype=np.float64).reshape(20, 6).T,  # Fortran, 20 columns: one copy
        np.arange(6, dtype=np.int64),  # one dim
        np.asfortranarray(np.arange(24).reshape(6, 4))[::2],  # neither order
    ],
)
def test_copy_batch_copies_every_ordering_exactly(value):
    target = np.zeros(value.shape, np.float64)
    copy_batch(target, value)
    np.testing.assert_array_equal(target, value)


# A fresh interpreter has not freed a large block yet: the heap's free top goes back to the
# system past 128 KiB, so temporaries of 64 KiB made and dropped together fault every step.
_FAULTS_PER_STEP = """
import resource, sys
import numpy as np
if sys.argv[1] == "settle":
    from gymvec.common.arrays import settle_allocator
    settle_allocator()
def step():
    temporaries = [np.ones(8192) for _ in range(24)]
    return sum(float(t[0]) for t in temporaries)
for _ in range(10):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def _faults_per_step(how: str) -> float:
    command = [sys.executable, "-c", _FAULTS_PER_STEP, how]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    return float(result.stdout)


@glibc
def test_settle_allocator_stops_the_page_faults_of_each_steps_temporaries():
    assert _faults_per_step("plain") > 50  # the unsettled process this guards against
    assert _faults_per_step("settle") < 1


@glibc
def test_worker_processes_step_their_sub_envs_without_page_faults():
    # spawn: a fresh interpreter, unsettled but for what the sub-env group does
    envs = ParallelVectorEnv([_envs.TemporariesEnv] * 2, num_workers=2, context="spawn")
    try:
        envs.reset(seed=0)
        faults = [envs.step(np.zeros(2, np.int64))[4]["faults"] for _ in range(30)]
        assert np.mean(np.stack(faults[10:])) < 1, faults
    finally:
        envs.close()
