"""Faults that heal when a worker process dies or hangs (API section 13): ``os._exit``, SIGSEGV,
a SIGKILL from outside and a step past ``timeout=`` start a new worker process in the dead
one's slot; every sub-env it held reads as truncated with its last observation and
``infos["fault"]``, and every other row equals gymnasium's SyncVectorEnv over the same envs
without the fault, step for step. Real worker processes, under each start method and
autoreset mode; a rerun gives the same trajectories; 60+ restarts leak nothing."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec
from gymvec.backends.processes.handles import CLOSE_GRACE_S, KILL_WAIT_S, TERM_GRACE_S
from gymvec.errors import WorkerError
from tests import _heal
from tests._flaky_envs import (
    FlakyCartPole,
    FlakyResetCartPole,
    exit_now,
    flaky_fns,
    healthy_fns,
)

N, ROW, EVERY, STEPS = 4, 1, 7, 24
WORKER_ROWS, OTHERS = [0, 1], [2, 3]  # the rows of the faulting sub-env's worker; the others


def parallel(fns: list, mode: str = "next_step", context: str = "fork", **kwargs):
    return gymvec.ParallelVectorEnv(
        fns,
        autoreset_mode=mode,
        num_workers=2,
        local_worker=False,
        context=context,
        on_fault=kwargs.pop("on_fault", "restart"),
        **kwargs,
    )


def actions(t: int) -> np.ndarray:
    return _heal.actions(t, N)


def run(envs, mode: str, steps: int = STEPS, before_step=None) -> list:
    return _heal.run(envs, mode, steps, before_step)


def check_against_reference(got: list, want: list, mode: str, message: str) -> int:
    return _heal.check_faulted_run(got, want, mode, WORKER_ROWS, message)


def reference(mode: str) -> list:
    return _heal.reference(mode, N, STEPS)


def heal_and_compare(envs, mode: str, message: str, kind: str = "death", **run_kwargs) -> list:
    try:
        got = run(envs, mode, **run_kwargs)
        restarts, faults = envs.restarts, envs.faults
        pids = {h.process.pid for h in envs.engine.executor.handles}
        assert {p.pid for p in multiprocessing.active_children()} >= pids
    finally:
        envs.close()
    faulted = check_against_reference(got, reference(mode), mode, message)
    assert faulted >= 2 and restarts.tolist() == [faulted, faulted, 0, 0]
    assert {f.kind for f in faults} == {kind} and {f.worker for f in faults} == {0}
    assert all(message in f.message and f.traceback is None for f in faults)
    return got


CASES = [
    pytest.param("exit", "fork", "next_step", "worker died: exit code 3", id="exit-fork-next"),
    pytest.param("exit", "fork", "same_step", "worker died: exit code 3", id="exit-fork-same"),
    pytest.param("exit", "fork", "disabled", "worker died: exit code 3", id="exit-fork-disabled"),
    pytest.param("segv", "fork", "next_step", "worker died: signal 11", id="segv-fork"),
    pytest.param("exit", "spawn", "next_step", "worker died: exit code 3", id="exit-spawn"),
    pytest.param("segv", "forkserver", "same_step", "worker died: signal 11", id="segv-fksrv"),
]


@pytest.fixture
def forkserver_up() -> None:
    """multiprocessing's forkserver, started before the leak check: it outlives the test
    (multiprocessing keeps it for the session), and is none of the env's."""
    from multiprocessing import forkserver

    forkserver.ensure_running()


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("how", "context", "mode", "message"), CASES)
def test_a_dead_worker_starts_again_and_the_others_run_as_without_it(
    how, context, mode, message, forkserver_up, no_leaks
) -> None:
    heal_and_compare(parallel(flaky_fns(N, ROW, EVERY, how), mode, context), mode, message)


@pytest.mark.timeout(120)
def test_a_worker_killed_from_outside_starts_again(no_leaks) -> None:
    envs = parallel(healthy_fns(N))

    def kill(t: int) -> None:
        if t in (3, 11):  # between steps: the next step finds it dead
            os.kill(envs.engine.executor.handles[0].process.pid, signal.SIGKILL)

    heal_and_compare(envs, "next_step", "worker died: signal 9", before_step=kill)


@pytest.mark.timeout(120)
def test_a_worker_that_dies_in_a_request_starts_again_at_the_next_command(no_leaks) -> None:
    envs = parallel(healthy_fns(N))

    def die(t: int) -> None:
        if t in (4, 12):  # the request raises; the next step heals (the worker sits it out)
            with pytest.raises(WorkerError, match="died"):
                envs.apply(exit_now, indices=[ROW])

    heal_and_compare(envs, "next_step", "worker died: exit code 3", before_step=die)


@pytest.mark.timeout(120)
def test_a_step_past_the_timeout_kills_the_worker_and_starts_it_again(no_leaks) -> None:
    envs = parallel(flaky_fns(N, ROW, EVERY, "hang"), timeout=1.0)
    heal_and_compare(envs, "next_step", "timed out after 1.0 s", kind="timeout")


@pytest.mark.timeout(120)
def test_a_rerun_with_the_same_faults_gives_the_same_trajectories() -> None:
    runs = []
    for _ in range(2):
        envs = parallel(flaky_fns(N, ROW, EVERY, "exit"))
        try:
            runs.append(run(envs, "next_step"))
        finally:
            envs.close()
    for first, second in zip(*runs):
        np.testing.assert_array_equal(first[0], second[0])  # every row, the faulted ones too


@pytest.mark.timeout(120)
def test_a_death_in_a_reset_is_retried_on_the_new_worker(no_leaks) -> None:
    fns = [functools.partial(FlakyResetCartPole, 2 if i == ROW else 0) for i in range(N)]
    envs = parallel(fns)
    try:
        envs.reset(seed=1)
        obs, infos = envs.reset(seed=2)  # sub-env 1's second reset: its worker dies
        restarts = envs.restarts
    finally:
        envs.close()
    assert restarts.tolist() == [1, 1, 0, 0]
    assert infos["_fault"].tolist() == [True, True, False, False]
    want = SyncVectorEnv(healthy_fns(N))
    expected, _ = want.reset(seed=2)
    want.close()
    np.testing.assert_array_equal(obs[OTHERS], expected[OTHERS])


@pytest.mark.timeout(120)
def test_past_the_limit_a_death_raises_naming_the_sub_env_and_its_restarts(no_leaks) -> None:
    envs = parallel(flaky_fns(N, ROW, 3, "exit"), on_fault=gymvec.Restart(limit=1))
    try:
        envs.reset(seed=0)
        with pytest.raises(WorkerError, match=r"sub-env 0 .*death.*worker died"):
            for t in range(20):
                envs.step(actions(t))
        assert envs.restarts.tolist() == [1, 1, 0, 0]
    finally:
        envs.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(300)
def test_sixty_restarts_leak_no_process_memory_or_descriptor(no_leaks) -> None:
    """A sub-env whose worker dies every third step: 60+ restarts; the live children are
    the current workers, descriptors stay as many, close() keeps its bound."""
    fns = [functools.partial(FlakyCartPole, 3 if i == 0 else 0, "exit") for i in range(N)]
    envs = parallel(fns, on_fault=gymvec.Restart(limit=1000))
    try:
        envs.reset(seed=0)
        fds = []
        for t in range(260):
            envs.step(actions(t))
            if t in (40, 259):
                fds.append(open_fds())
        restarts = int(envs.restarts[0])
        children = {p.pid for p in multiprocessing.active_children()}
        workers = {h.process.pid for h in envs.engine.executor.handles}
    finally:
        began = time.monotonic()
        envs.close()
        closing = time.monotonic() - began
    assert restarts >= 60
    assert children == workers
    assert fds[1] == fds[0]
    assert closing < CLOSE_GRACE_S + TERM_GRACE_S + KILL_WAIT_S


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_a_dead_worker_that_holds_a_block_starts_again(mode, no_leaks) -> None:
    """Blocks of two CartPoles, one per worker: the first worker is killed twice from
    outside; its block is rebuilt in the new process and reset before it steps; the other
    block's rows run as SyncVectorEnv's."""
    from tests._block_envs import cartpole, sync_block_fn

    autoreset = AutoresetMode[mode.upper()]
    envs = parallel([gymvec.BlockFactory(sync_block_fn(2, autoreset), 2)] * 2, mode)

    def kill(t: int) -> None:
        if t in (3, 11):
            os.kill(envs.engine.executor.handles[0].process.pid, signal.SIGKILL)

    try:
        got = run(envs, mode, before_step=kill)
        restarts, faults = envs.restarts, envs.faults
    finally:
        envs.close()
    want = SyncVectorEnv([cartpole] * N, autoreset_mode=autoreset)
    try:
        faulted = check_against_reference(got, run(want, mode), mode, "worker died: signal 9")
    finally:
        want.close()
    assert faulted == 2 and restarts.tolist() == [2, 0]
    assert [(f.sub_env, f.rows, f.kind) for f in faults] == [(0, (0, 1), "death")] * 2
