"""Interrupts, deaths and hangs end in bounded time, with nothing left behind (issue 37).

The scenarios that could hang or orphan processes run in a process of their own
(``_crash_scripts.py``) under a timeout, and the tests check by pid that nothing they started
is left; a test whose bug came back then fails instead of blocking the suite.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _crash_envs import make, make_bad_close, running

from gymvec import ClosedEnvError, ParallelEnv, ParallelVectorEnv, WorkerError

try:
    from gymvec.backends.processes.handles import CLOSE_GRACE_S, KILL_WAIT_S, TERM_GRACE_S
except ImportError:  # an older gymvec (to see these tests fail on it): the bounds it claims
    CLOSE_GRACE_S, TERM_GRACE_S, KILL_WAIT_S = 5.0, 1.0, 1.0

pytestmark = pytest.mark.timeout(120)

SCRIPT = str(Path(__file__).parents[1] / "_crash_scripts.py")
START_METHODS = ["fork", "spawn", "forkserver"]
CLOSE_BOUND_S = CLOSE_GRACE_S + TERM_GRACE_S + KILL_WAIT_S


def kill_left(pids: list[int]) -> list[int]:
    """The pids of ``pids`` still running, each then killed: a failed test leaves no orphan."""
    left = [pid for pid in pids if pid and running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def run_script(*args: str, timeout: float) -> dict:
    """Run a scenario of _crash_scripts.py; its JSON line (a hang fails at ``timeout``)."""
    env = dict(os.environ)
    env.setdefault("GYMVEC_CRASH_INFO_BYTES", "4000000")  # 20 MB in a long run by hand
    done = subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- 1: an interrupted reply poisons nothing -----------------------------------------------------
@pytest.mark.parametrize("mode", ["cut", "timer"])
@pytest.mark.parametrize("start", START_METHODS)
def test_interrupts_during_big_replies_never_hang_the_recovery(start, mode):
    # Interrupts into steps whose replies are 20 MB each ("cut": always while a reply is
    # read; "timer": SIGINT at varying delays, anywhere). reset() then works, or, where the
    # interrupt cut a reply short, raises a WorkerError that says the worker was stopped.
    # Before: reset() read the rest of the cut reply as a new message, and hung or raised
    # "died" for a live worker. (GYMVEC_CRASH_ROUNDS=200 for a long run by hand.)
    rounds = int(os.environ.get("GYMVEC_CRASH_ROUNDS", "1" if mode == "cut" else "3"))
    result = run_script("interrupts", start, str(rounds), mode, timeout=120 + 20 * rounds)
    assert result["rounds"] == rounds
    if mode == "cut":
        assert result["rebuilt"] == rounds
    assert result["slowest_s"] < 10  # each reset(): done, or refused with WorkerError
    assert result["close_s"] < CLOSE_BOUND_S


# ---- 2, 3, 4: the parent's death -----------------------------------------------------------------
@pytest.mark.parametrize("doing", ["idle", "write", "hang"])
@pytest.mark.parametrize("start", START_METHODS)
def test_workers_exit_soon_after_their_parent_is_killed(start, doing):
    # Whatever the workers do (wait for a command, write a reply nobody reads, run an
    # endless step), they exit within seconds of the parent's SIGKILL, the forkserver too,
    # and the memmap files and semaphores' /dev/shm entries are gone. Before: forkserver
    # workers and forked writers stayed forever, and the memmap files stayed.
    parent = subprocess.Popen(
        [sys.executable, SCRIPT, "parent_dies", start, doing], stdout=subprocess.PIPE, text=True
    )
    try:
        started = json.loads(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    pids = started["workers"] + [started["forkserver"]]
    deadline = time.monotonic() + 5
    while any(pid and running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = kill_left(pids)
    deadline = time.monotonic() + 2  # (multiprocessing's resource tracker unlinks semaphores)
    while any(os.path.exists(p) for p in started["files"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    files = [path for path in started["files"] if os.path.exists(path)]
    for path in files:
        os.unlink(path)
    assert left == [] and files == []


# ---- 5: close() is bounded in total --------------------------------------------------------------
def test_close_is_bounded_in_total_when_every_sub_env_hangs_in_close(no_leaks):
    # Three workers whose sub-envs take 60 s to close: close() asks them all at once, and
    # SIGTERMs them all at the same deadline. Before: 6 s per worker, one after another.
    env = ParallelEnv(3, make, create_env_kwargs={"close_s": 60.0}, mp_start_method="fork")
    env.reset()
    pids = [handle.process.pid for handle in env.engine.executor.handles]
    began = time.monotonic()
    env.close()
    seconds = time.monotonic() - began
    assert kill_left(pids) == []
    assert seconds < CLOSE_GRACE_S + TERM_GRACE_S + 1.0


def test_close_is_bounded_while_the_forkserver_is_stopped():
    # The forkserver relays its children's exit codes: stopped, it never does. Before: the
    # last join() of close() had no bound and waited forever.
    result = run_script("stopped_forkserver", timeout=60)
    assert result["seconds"] < CLOSE_BOUND_S + 1
    assert kill_left(result["workers"]) == []


# ---- 6: close() from another thread --------------------------------------------------------------
@pytest.mark.parametrize("api", ["vector", "tensordict"])
def test_close_from_another_thread_makes_the_waiting_step_raise_closed(api, no_leaks):
    # Before: AttributeError ('str' object has no attribute 'next') or a half-closed pipe.
    if api == "vector":
        env = ParallelVectorEnv([lambda: make(step_s=2.0)] * 2, context="fork", num_workers=2)
        env.reset(seed=0)
        step = functools.partial(env.step, np.zeros(2, dtype=np.int64))
    else:
        env = ParallelEnv(2, make, create_env_kwargs={"step_s": 2.0}, mp_start_method="fork")
        step = functools.partial(env.step, env.rand_action(env.reset()))
    closer = threading.Timer(0.3, env.close)
    closer.start()
    try:
        with pytest.raises(ClosedEnvError, match="closed"):
            step()
    finally:
        closer.join()
        env.close()


# ---- 7: start-up within the user's timeout -------------------------------------------------------
def test_the_drop_in_timeout_bounds_a_factory_that_hangs_in_its_worker():
    # Before: construction waited for the 120 s start-up default (and 6 s more to close).
    result = run_script("hanging_factory", "fork", "2", timeout=30)
    assert result["error"] is not None and result["error"].startswith("SubEnvTimeoutError")
    assert "sub-env 1's factory is still running" in result["error"]
    assert result["seconds"] < 2 + CLOSE_BOUND_S


def test_startup_timeout_is_one_deadline_for_all_workers(no_leaks):
    # Both workers' factories hang: one 1 s deadline for both, and the close ends them at
    # once (they could not read a close request). Before: 1 s per worker, then 6 s each to
    # close them.
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"sub-env 0's factory .* sub-env 1's factory"):
        ParallelEnv(
            2,
            make,
            create_env_kwargs={"factory_s": 60.0},
            mp_start_method="fork",
            startup_timeout=1.0,
        ).reset()
    assert time.monotonic() - began < 1 + TERM_GRACE_S + 1.5


# ---- 8: the smaller ones -------------------------------------------------------------------------
def test_parallel_env_timeout_bounds_the_factories_too(no_leaks):
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="sub-env 1's factory is still running"):
        ParallelEnv(
            2,
            make,
            create_env_kwargs=[{}, {"factory_s": 60.0}],
            mp_start_method="fork",
            timeout=1.0,
        ).reset()
    assert time.monotonic() - began < 1 + TERM_GRACE_S + 1.5


def test_a_worker_sub_env_whose_close_raises_is_raised(no_leaks):
    # As the sub-envs of this process: raised once every worker has stopped, not printed.
    env = ParallelEnv(2, make_bad_close, mp_start_method="fork")
    env.reset()
    with pytest.raises(WorkerError, match="raised") as info:
        env.close()
    assert isinstance(info.value, RuntimeError)
    assert "worker close failed on purpose" in info.value.worker_traceback
    assert env.is_closed


def test_no_sub_env_steps_once_a_worker_is_known_dead(no_leaks):
    envs = ParallelVectorEnv([make] * 2, context="fork", num_workers=2, local_worker=False)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, dtype=np.int64))
        os.kill(envs.engine.executor.handles[1].process.pid, signal.SIGKILL)
        for _ in range(2):
            with pytest.raises(WorkerError, match="worker 1"):
                envs.step(np.zeros(2, dtype=np.int64))
        # sub-env 0 stepped twice (the first failed step ran it): not once per failed step
        assert envs.engine.request("get_attr", [0], name="steps") == [2]
    finally:
        envs.close()


@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_a_plain_fork_child_leaves_the_parents_workers_alone(start):
    # Before: the child's exit SIGTERMed the parent's daemonic workers.
    assert run_script("raw_fork", start, timeout=60) == {"alive": [True, True]}
