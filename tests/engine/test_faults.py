"""Failing and dying workers: WorkerError instead of a hang, then a clean close.

Every test here runs under a pytest timeout: a hang fails the test instead of blocking CI.
``no_leaks`` checks that no child process and no /dev/shm entry outlives the test.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from _envs import (
    CLOSED,
    BadCloseCartPole,
    BadResetEnv,
    BadStepResultEnv,
    MisshapenEnv,
    make_broken,
    make_gym_cartpole,
    make_gym_env,
    make_gym_env_in_parent_only,
    make_gym_exiting_in_worker,
    make_gym_failing,
    make_gym_hanging,
    make_gym_stalling,
)
from conftest import child_pids, open_fds, shm_entries

from gymvec import (
    ClosedEnvError,
    ParallelEnv,
    ParallelVectorEnv,
    SerialEnv,
    SerialVectorEnv,
    SpaceMismatchError,
    WorkerError,
)

pytestmark = pytest.mark.timeout(60)

FAILS_AT_STEP_3 = [make_gym_failing, functools.partial(make_gym_failing, fail_step=3)]


def assert_closed_cleanly(env) -> None:
    env.close()
    env.close()  # twice: harmless
    assert env.is_closed
    with pytest.raises(ClosedEnvError):
        env.step(env.rand_action())
    with pytest.raises(ClosedEnvError):
        env.reset()


def actions(env):
    return env.rand_action(env.reset())


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_exception_in_step_raises_worker_error_with_traceback(start, no_leaks):
    env = ParallelEnv(2, FAILS_AT_STEP_3, mp_start_method=start)
    td = actions(env)
    env.step(td)
    env.step(td)
    with pytest.raises(WorkerError, match="worker 1") as info:
        env.step(td)
    error = info.value
    assert error.worker_index == 1
    assert "Traceback" in error.worker_traceback
    assert "RuntimeError: step 3 failed on purpose" in error.worker_traceback
    assert "step 3 failed on purpose" in str(error)
    # the env reports the failure again rather than hanging or losing track of the command
    with pytest.raises(WorkerError, match="step 4 failed on purpose"):
        env.step(td)
    assert_closed_cleanly(env)


def test_exception_in_step_and_maybe_reset(no_leaks):
    env = ParallelEnv(1, FAILS_AT_STEP_3[1], envs_per_worker=2, mp_start_method="fork")
    td = actions(env)
    env.step_and_maybe_reset(td)
    env.step_and_maybe_reset(td)
    with pytest.raises(WorkerError, match="step 3 failed on purpose"):
        env.step_and_maybe_reset(td)
    assert_closed_cleanly(env)


def test_exception_at_reset_raises_worker_error(no_leaks):
    fails = functools.partial(make_gym_failing, fail_reset=True)
    env = ParallelEnv(2, [make_gym_failing, fails], mp_start_method="fork")
    with pytest.raises(WorkerError, match="reset failed on purpose") as info:
        env.reset()
    assert info.value.worker_index == 1
    assert "Traceback" in info.value.worker_traceback
    assert_closed_cleanly(env)


def test_factory_failing_in_the_parent_raises_at_construction(no_leaks):
    with pytest.raises(RuntimeError, match="the factory failed on purpose"):
        ParallelEnv(2, make_broken, mp_start_method="fork")


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_factory_failing_in_a_worker_raises_worker_error(start, no_leaks):
    env = ParallelEnv(2, make_gym_env_in_parent_only, mp_start_method=start)
    with pytest.raises(WorkerError, match="create_env_fn raised") as info:
        env.reset()
    assert "RuntimeError: the factory failed on purpose in a worker" in info.value.worker_traceback
    assert_closed_cleanly(env)


def test_worker_exiting_in_its_factory_raises_worker_error(no_leaks):
    env = ParallelEnv(2, make_gym_exiting_in_worker, mp_start_method="fork")
    # both workers exit: the error names whichever the startup wait saw end first
    with pytest.raises(WorkerError, match="worker [01] .*died \\(exit code 3\\)") as info:
        env.reset()  # the workers start here: the startup wait sees the process end
    assert str(info.value).startswith(f"worker {info.value.worker_index} ")
    assert_closed_cleanly(env)


def test_factory_failing_in_a_worker_of_a_multi_task_env(no_leaks):
    # the parent describes each task itself; the workers build theirs at the first command
    env = ParallelEnv(2, [make_gym_cartpole, make_gym_env_in_parent_only], mp_start_method="fork")
    with pytest.raises(WorkerError, match="create_env_fn raised"):
        env.reset()
    env.close()


def test_mismatched_multi_task_specs_leave_no_worker(no_leaks):
    # the tasks' observations cannot share the buffers: refused before any worker starts
    fns = [make_gym_cartpole, functools.partial(make_gym_env, "Pendulum-v1")]
    with pytest.raises(SpaceMismatchError, match="observation_spec: key") as info:
        ParallelEnv(2, fns, mp_start_method="fork")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_killed_worker_raises_worker_error(start, no_leaks):
    env = ParallelEnv(2, make_gym_cartpole, mp_start_method=start)
    td = actions(env)
    env.step(td)
    victim = env.engine.executor.handles[1].process.pid
    assert victim in child_pids()
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(WorkerError, match="worker 1.*died.*SIGKILL") as info:
        env.step(td)
    assert info.value.worker_index == 1
    assert info.value.worker_traceback is None
    assert_closed_cleanly(env)


def test_killed_worker_with_the_low_level_api(no_leaks):
    env = ParallelEnv(2, make_gym_cartpole, envs_per_worker=2, mp_start_method="fork")
    env.reset()
    os.kill(env.engine.executor.handles[0].process.pid, signal.SIGKILL)
    env.buffers.action[("action",)][:] = 1
    env.engine.step_send()
    with pytest.raises(WorkerError, match="worker 0.*died"):
        env.engine.recv(timeout=10.0)  # a dead worker is noticed, not waited for until the timeout
    assert_closed_cleanly(env)


def test_killed_worker_during_a_request(no_leaks):
    env = ParallelEnv(2, make_gym_cartpole, mp_start_method="fork")
    env.reset()
    os.kill(env.engine.executor.handles[1].process.pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match="worker 1"):
        env.spec  # noqa: B018
    assert_closed_cleanly(env)


def test_close_stops_a_hung_worker_that_ignores_sigterm(no_leaks):
    # The worker never answers: recv times out, and close() escalates from CLOSE to SIGTERM
    # (ignored here) to SIGKILL within its bounded waits instead of joining forever.
    env = ParallelEnv(1, make_gym_hanging, envs_per_worker=2, mp_start_method="fork")
    env.reset()
    pid = env.engine.executor.handles[0].process.pid
    env.buffers.action[("action",)][:] = 0
    env.engine.step_send()
    with pytest.raises(TimeoutError):
        env.engine.recv(timeout=0.3)
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < 20
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped
    assert_closed_cleanly(env)


def test_serial_env_exception_propagates_as_is():
    env = SerialEnv(2, FAILS_AT_STEP_3)
    td = actions(env)
    env.step(td)
    env.step(td)
    with pytest.raises(RuntimeError, match="step 3 failed on purpose"):
        env.step(td)
    assert_closed_cleanly(env)


def test_unclosed_env_is_stopped_when_collected(no_leaks):
    env = ParallelEnv(2, make_gym_cartpole, mp_start_method="fork")
    env.reset()
    assert len(child_pids()) >= 2
    del env
    gc.collect()


def test_open_close_cycles_leak_no_file_descriptor(no_leaks):
    def cycle() -> None:
        env = ParallelEnv(1, make_gym_cartpole, mp_start_method="fork")
        td = actions(env)
        env.step(td)
        env.close()

    cycle()  # first use of multiprocessing's shared heap and semaphores
    gc.collect()
    before = open_fds()
    for _ in range(30):
        cycle()
    gc.collect()
    assert open_fds() == before


def test_killed_worker_cycles_leak_no_file_descriptor(no_leaks):
    def cycle() -> None:
        env = ParallelEnv(1, make_gym_cartpole, mp_start_method="fork")
        td = actions(env)
        os.kill(env.engine.executor.handles[0].process.pid, signal.SIGKILL)
        with pytest.raises(WorkerError):
            env.step(td)
        env.close()

    cycle()
    gc.collect()
    before = open_fds()
    for _ in range(5):
        cycle()
    gc.collect()
    assert open_fds() == before


@pytest.mark.parametrize("killed", [False, True], ids=["closed", "killed-then-closed"])
def test_close_removes_the_named_semaphores_of_a_still_referenced_env(killed, no_leaks):
    """Under spawn, multiprocessing names each semaphore in /dev/shm and used to remove the
    names only when they were garbage-collected: a closed env still referenced (or a kept
    WorkerError, whose traceback holds the wait's frame) kept its names until the end of the
    process. close() removes them, however many references are left."""
    before = shm_entries()
    env = ParallelVectorEnv(
        [make_gym_cartpole] * 2,
        context="spawn",
        num_workers=2,
        local_worker=False,
        max_concurrency=1,
    )
    executor = env.engine.executor
    semaphores = [s for h in executor.handles for s in (h.wake, h.done)]
    semaphores += [executor.concurrency, executor.ready]
    names = {"sem." + s._semlock.name.lstrip("/") for s in semaphores}
    assert names <= shm_entries() - before  # two per worker, max_concurrency's, first-ready's
    env.reset(seed=0)
    error = None
    if killed:
        os.kill(executor.handles[0].process.pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match="worker 0.*died") as info:
            env.step(np.zeros(2, dtype=np.int64))
        error = info.value
    env.close()
    assert shm_entries() & names == set()  # env, semaphores and error all still referenced
    assert env.closed and len(semaphores) == 6 and (error is not None) == killed


# ---- interrupts (Ctrl-C) ----------------------------------------------------------------------
@contextlib.contextmanager
def interrupted_after(seconds: float):
    """A KeyboardInterrupt in this (the main) thread after ``seconds``, as Ctrl-C raises it."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def assert_usable_after_a_full_reset(env) -> None:
    """Stepping without a full reset is refused; attribute requests work; a full reset makes
    the env step as a fresh one does."""
    some = torch.zeros(env.num_envs, 1, dtype=torch.bool)
    some[0] = True
    for attempt in (
        lambda: env.step(env.rand_action()),
        lambda: env.reset(env.rand_action().set("_reset", some)),  # a partial reset
    ):
        with pytest.raises(RuntimeError, match="reset every sub-env"):
            attempt()
    assert len(env.steps) == env.num_envs  # requests go through
    env.set_seed(7)
    root = env.reset()
    with SerialEnv(env.num_envs, make_gym_cartpole) as reference:
        reference.set_seed(7)
        expected = reference.reset()
        assert (root["observation"] == expected["observation"]).all()
        for _ in range(3):
            root["action"] = expected["action"] = reference.rand_action()["action"]
            (_, root), (_, expected) = (
                env.step_and_maybe_reset(root),
                reference.step_and_maybe_reset(expected),
            )
            assert (root["observation"] == expected["observation"]).all()


@pytest.mark.parametrize("local_worker", [False, True])
def test_interrupt_while_waiting_for_workers(local_worker, no_leaks):
    # The second step of every sub-env takes 0.5 s; Ctrl-C lands while the parent waits.
    env = ParallelEnv(2, make_gym_stalling, mp_start_method="fork", local_worker=local_worker)
    td = env.rand_action(env.reset())
    env.step(td)
    with pytest.raises(KeyboardInterrupt), interrupted_after(0.2):
        env.step(td)
    assert_usable_after_a_full_reset(env)
    assert_closed_cleanly(env)


def test_interrupt_inside_a_sub_env_of_this_process(no_leaks):
    # SerialEnv, and ParallelEnv's own share: the interrupt stops the sub-envs' loop midway.
    kwargs = [{"stall_step": 2, "stall_s": None}, {"stall_step": 0}]  # sub-env 0 only
    for env in (
        SerialEnv(2, make_gym_stalling, create_env_kwargs=kwargs),
        ParallelEnv(
            2,
            make_gym_stalling,
            create_env_kwargs=kwargs,
            mp_start_method="fork",
            local_worker=True,
        ),
    ):
        td = env.rand_action(env.reset())
        env.step(td)
        with pytest.raises(KeyboardInterrupt):
            env.step(td)
        assert_usable_after_a_full_reset(env)
        assert_closed_cleanly(env)


def test_interrupted_recv_of_the_low_level_api(no_leaks):
    env = ParallelEnv(2, make_gym_stalling, mp_start_method="fork")
    env.reset()
    env.engine.step()
    env.engine.step_send()
    with pytest.raises(KeyboardInterrupt), interrupted_after(0.2):
        env.engine.recv()
    with pytest.raises(RuntimeError, match="interrupted: its results are lost"):
        env.engine.recv()
    with pytest.raises(RuntimeError, match="no command in flight"):
        env.engine.recv()
    assert_usable_after_a_full_reset(env)
    assert_closed_cleanly(env)


def test_interrupted_step_of_the_drop_in(no_leaks):
    from gymvec import ParallelVectorEnv

    envs = ParallelVectorEnv([make_gym_stalling] * 2, context="fork")
    envs.reset(seed=3)
    envs.step(np.array([0, 1]))
    with pytest.raises(KeyboardInterrupt), interrupted_after(0.2):
        envs.step(np.array([0, 1]))
    with pytest.raises(RuntimeError, match="reset every sub-env"):
        envs.step(np.array([0, 1]))
    obs, _ = envs.reset(seed=3)
    reference = gym.vector.SyncVectorEnv([make_gym_cartpole] * 2)
    expected, _ = reference.reset(seed=3)
    np.testing.assert_array_equal(obs, expected)
    np.testing.assert_array_equal(envs.step(np.array([0, 1]))[0], reference.step([0, 1])[0])
    reference.close()
    envs.close()


def test_workers_ignore_sigint(no_leaks):
    # A terminal's Ctrl-C reaches the whole process group: what it means is the caller's call.
    env = ParallelEnv(2, make_gym_cartpole, mp_start_method="fork")
    td = env.rand_action(env.reset())
    for handle in env.engine.executor.handles:
        os.kill(handle.process.pid, signal.SIGINT)
    time.sleep(0.2)
    env.step(td)
    assert all(handle.process.is_alive() for handle in env.engine.executor.handles)
    assert_closed_cleanly(env)


# ---- sub-envs whose outputs do not fit their spaces ---------------------------------------------
@pytest.mark.parametrize("kind", ["serial", "fork"])
@pytest.mark.parametrize(
    "obs_kind, expected",
    [
        (
            "plain",
            r"sub-env 1 returned observation 'observation' of shape \(3,\) and dtype "
            r"float32; its observation space has shape \(4,\) and dtype float32",
        ),
        (
            "scalar",
            r"sub-env 1 returned observation 'observation' of shape \(\) and dtype float64; "
            r"its observation space has shape \(4,\)",
        ),
        (
            "dict",
            r"sub-env 1 returned an observation without the entry 'b' that its "
            r"observation space has",
        ),
    ],
)
def test_an_observation_that_does_not_fit_names_the_sub_env_and_key(kind, obs_kind, expected):
    assert_second_step_raises(kind, functools.partial(MisshapenEnv, kind=obs_kind), expected)


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_observation_lengths_that_only_add_up_are_refused(kind):
    # 3 + 5 values fill the 2 x 4 rows of one group's batch: written as one block, they would
    # land misaligned without an error
    fns = [functools.partial(MisshapenEnv, 1, kind_) for kind_ in ("plain", "long")]
    envs = SerialVectorEnv(fns) if kind == "serial" else ParallelVectorEnv(fns, num_workers=1)
    try:
        envs.reset(seed=0)
        expected = r"sub-env 0 returned observation 'observation' of shape \(3,\)"
        with pytest.raises(ValueError, match=expected):
            envs.step(np.array([0, 1]))
    finally:
        envs.close()


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_an_autoreset_observation_that_does_not_fit_names_the_sub_env(kind):
    # SAME_STEP: the finished sub-envs reset into the root within the step
    fns = [functools.partial(BadResetEnv, False), BadResetEnv]
    if kind == "serial":
        env = SerialEnv(2, fns)
    else:
        env = ParallelEnv(1, fns, envs_per_worker=2, mp_start_method="fork")
    try:
        td = env.reset()
        td["action"] = torch.zeros(2, dtype=torch.int64)
        expected = r"sub-env 1 returned observation 'observation' of shape \(3,\) and dtype"
        with pytest.raises(ValueError, match=expected):
            env.step_and_maybe_reset(td)
    finally:
        env.close()


def assert_second_step_raises(kind: str, make_env, expected: str) -> None:
    """Sub-env 1 misbehaves from its second step (sub-env 0 from its third): the second step
    raises a ValueError whose message matches ``expected``."""
    fns = [functools.partial(make_env, bad_step=3), functools.partial(make_env, bad_step=2)]
    cls = SerialVectorEnv if kind == "serial" else ParallelVectorEnv
    envs = cls(fns, **({} if kind == "serial" else {"context": "fork"}))
    try:
        envs.reset(seed=0)
        envs.step(np.array([0, 1]))
        with pytest.raises(ValueError, match=expected):
            envs.step(np.array([0, 1]))
    finally:
        envs.close()


INHERITING_SCRIPT = """
import gc, sys
sys.path.insert(0, sys.argv[1])
import _envs
from gymvec import ParallelEnv
gc.disable()
old = ParallelEnv(2, _envs.make_gym_cartpole, mp_start_method="fork")
old.reset()
old.cycle = old  # garbage that only the cyclic collector frees
del old
env = ParallelEnv(2, _envs.make_gym_cartpole_after_collecting, mp_start_method="fork")
env.reset()
gc.enable()
gc.collect()
env.close()
print("done")
"""


def test_a_forked_worker_leaves_inherited_envs_to_their_owner():
    # An unclosed env is still garbage in this process when the next env forks its workers;
    # freed in a worker, it must not try to shut down what is not the worker's.
    tests_dir = str(Path(__file__).parents[1])
    run = subprocess.run(
        [sys.executable, "-c", INHERITING_SCRIPT, tests_dir],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr
    assert "Exception ignored" not in run.stderr, run.stderr


@pytest.mark.parametrize("kind", ["serial", "fork"])
@pytest.mark.parametrize(
    "field, expected",
    [
        ("reward", r"sub-env 1 returned reward array\(\[1\.\]\); expected a number"),
        ("terminated", r"sub-env 1 returned terminated array\(\[ True, False\]\); expected a bool"),
    ],
)
def test_a_step_result_that_is_not_a_scalar_names_the_sub_env_and_entry(kind, field, expected):
    assert_second_step_raises(kind, functools.partial(BadStepResultEnv, field=field), expected)


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_a_sub_env_whose_close_raises(kind, no_leaks):
    # Every other sub-env is closed, the workers stopped and the memory released; the
    # error reaches the caller, and the env counts as closed.
    kwargs = [{"tag": 0}, {"tag": 1, "fails": False}, {"tag": 2, "fails": False}]
    if kind == "serial":
        env = SerialEnv(3, BadCloseCartPole, create_env_kwargs=kwargs)
    else:  # sub-env 0 in this process, the others in a worker
        env = ParallelEnv(
            2,
            BadCloseCartPole,
            create_env_kwargs=kwargs,
            envs_per_worker=[1, 2],
            local_worker=True,
            mp_start_method="fork",
            memmap=True,
        )
    memmaps = [m.path for m in env.engine.backend.memmaps] if kind == "parallel" else []
    td = env.rand_action(env.reset())
    env.step(td)
    env.step(td)
    CLOSED.clear()
    with pytest.raises(RuntimeError, match="close failed on purpose"):
        env.close()
    assert sorted(CLOSED) == ([0, 1, 2] if kind == "serial" else [0])
    assert all(not os.path.exists(path) for path in memmaps)
    assert_closed_cleanly(env)


def test_an_interrupted_request_leaves_no_answer_unread(no_leaks):
    # The next request reads the interrupted one's answers first, not as its own.
    envs = ParallelVectorEnv([make_gym_stalling] * 3, context="fork", num_workers=3)
    envs.reset(seed=0)
    with pytest.raises(KeyboardInterrupt), interrupted_after(0.2):
        envs.call("pause", 0.5)
    assert envs.get_attr("steps") == (0, 0, 0)
    assert envs.call("pause", 0.0) == ("paused",) * 3
    envs.step(np.array([0, 1, 0]))
    assert envs.get_attr("steps") == (1, 1, 1)
    envs.close()


def test_a_request_value_no_pickle_carries_changes_nothing(no_leaks):
    import threading

    envs = ParallelVectorEnv([make_gym_cartpole] * 3, context="fork", num_workers=3)
    envs.reset(seed=0)
    with pytest.raises(TypeError, match="lock"):
        envs.set_attr("tag", [1, 2, threading.Lock()])  # the last value is the second worker's
    with pytest.raises(AttributeError, match="tag"):
        envs.get_attr("tag")
    envs.set_attr("tag", [1, 2, 3])
    assert envs.get_attr("tag") == (1, 2, 3)
    envs.close()
