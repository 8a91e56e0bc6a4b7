"""The wait between parent and workers: spin, then block; spinning backs off while it fails."""

from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

from gymvec.backends.processes.signals import SYNC_WORDS, PeerDied, Spin, wait_for

pytestmark = pytest.mark.timeout(60)


def fail(spin: Spin, times: int) -> None:
    for _ in range(times):
        assert spin.budget() > 0
        spin.record(False)


def test_spin_backs_off_after_repeated_failures_then_tries_again():
    spin = Spin(1e-4)
    fail(spin, Spin.FAILURES - 1)
    assert spin.budget() == 1e-4  # not yet
    spin.record(False)
    for _ in range(Spin.BACKOFF_WAITS):
        assert spin.budget() == 0.0  # blocks at once
    assert spin.budget() == 1e-4  # and spins again afterwards


def test_spin_keeps_spinning_when_most_spins_succeed():
    spin = Spin(1e-4)
    for _ in range(10 * Spin.BACKOFF_WAITS):
        assert spin.budget() == 1e-4
        spin.record(True)
        spin.record(True)
        spin.record(False)  # one failure in three
    assert spin.budget() == 1e-4


def test_spin_keeps_spinning_through_bursts_of_failures():
    # a host whose cores slow down for a while: most spins of a burst fail
    spin = Spin(1e-4)
    for _ in range(10 * Spin.BACKOFF_WAITS):
        fail(spin, Spin.SUCCESS_CREDIT - 1)
        spin.record(True)
    assert spin.budget() == 1e-4


def test_spin_backs_off_when_nearly_every_spin_fails():
    spin = Spin(1e-4)
    waits = 0
    while spin.budget() > 0:  # one success in SUCCESS_CREDIT + 2 waits
        waits += 1
        spin.record(waits % (Spin.SUCCESS_CREDIT + 2) == 0)
        assert waits < 100 * Spin.FAILURES, "never backed off"
    assert all(spin.budget() == 0.0 for _ in range(Spin.BACKOFF_WAITS - 1))
    assert spin.budget() == 1e-4


def test_zero_spin_never_spins():
    spin = Spin(0.0)
    assert spin.budget() == 0.0


def make_words() -> np.ndarray:
    return np.zeros(SYNC_WORDS, dtype=np.int64)


def test_wait_for_returns_when_the_word_is_posted_while_blocked():
    words, sem = make_words(), mp.Semaphore(0)

    def post() -> None:
        words[0] = 1
        sem.release()

    timer = threading.Timer(0.05, post)
    timer.start()
    wait_for(words, 0, 1, sem, Spin(1e-5), lambda: True, timeout=5.0)  # spins, fails, blocks
    timer.join()
    assert words[0] == 1


def test_wait_for_raises_timeout_and_peer_died():
    words, sem = make_words(), mp.Semaphore(0)
    with pytest.raises(TimeoutError):
        wait_for(words, 0, 1, sem, Spin(0.0), lambda: True, timeout=0.1)
    with pytest.raises(PeerDied):
        wait_for(words, 0, 1, sem, Spin(0.0), lambda: False, timeout=5.0)


def test_the_engine_imports_no_torch():
    """The engine (and so a worker of gymnasium sub-envs, which imports its modules) never
    needs torch (seconds of start-up per spawned worker) nor tensordict."""
    import subprocess
    import sys

    code = (
        "import sys, gymvec, gymvec.engine, gymvec.engine.protocol; "
        "print(sorted(m for m in ('torch', 'tensordict') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_gymnasium_face_over_the_engine_imports_no_torch():
    """The drop-ins run on the engine alone: building and stepping them imports no torch."""
    import subprocess
    import sys

    code = (
        "import sys, gymnasium as gym, gymvec\n"
        "if __name__ == '__main__':\n"
        "    fns = [lambda: gym.make('CartPole-v1')] * 2\n"
        "    for cls in (gymvec.SerialVectorEnv, gymvec.ParallelVectorEnv):\n"
        "        envs = cls(fns)\n"
        "        envs.reset(seed=0)\n"
        "        envs.step(envs.action_space.sample())\n"
        "        envs.close()\n"
        "    print(sorted(m for m in ('torch', 'tensordict') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
