"""The executor contract (``gymvec/backends/executor.py``): one suite, every executor.

Each case runs on :class:`LocalExecutor` (sub-envs in this process), ``ProcessExecutor``
(worker processes over shared memory; with and without a share of this process) and
``RayExecutor`` (Ray actors; where Ray is installed), driven through ``BatchEngine``'s public
verbs, as stable-baselines3's tests run one suite over every ``VecEnv`` class. Trajectories are
checked against gymnasium's ``SyncVectorEnv`` (same seeds, same actions).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from gymnasium.vector import AutoresetMode

# Before Ray is imported: every Ray process then binds 127.0.0.1, never the machine's address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _executor_envs import make_cartpole, make_probe  # noqa: E402

from gymvec import ClosedEnvError, WorkerError  # noqa: E402
from gymvec.engine import (  # noqa: E402
    BatchEngine,
    LocalExecutor,
    ProcessOptions,
    SubEnvFactories,
    process_backend,
    serial_backend,
)
from gymvec.errors import SubEnvTimeoutError  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKERS, PER_WORKER = 2, 2
N = WORKERS * PER_WORKER
OBS = ("observation",)
ACTION = ("action",)

pytestmark = pytest.mark.timeout(120)

# Every executor, and the ones that run sub-envs outside this process (only those can cut a
# hung sub-env short: the contract lets LocalExecutor check its timeout between sub-envs).
REMOTE = ["processes", "processes+local", "ray"]
EXECUTORS = ["local", *REMOTE]


@pytest.fixture(scope="module")
def executor(request):
    """The executor's name; Ray is started (loopback only) for the Ray cases, and pytest runs
    those last (a module-scoped parameter groups the cases), so no worker is forked from a
    process that runs Ray's threads."""
    name = request.param
    if name != "ray":
        yield name
        return
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        yield name
        return
    # Ray's workers import this checkout's gymvec and this suite's envs by reference.
    path = os.pathsep.join([str(REPO), str(REPO / "tests"), str(HERE)])
    ray.init(
        num_cpus=WORKERS,
        object_store_memory=100 * 2**20,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        log_to_driver=False,
    )
    yield name
    ray.shutdown()


def every(names: list[str]):
    return pytest.mark.parametrize("executor", names, indirect=True)


def backend_of(name: str):
    if name == "local":
        return serial_backend()
    if name == "ray":
        from gymvec.backends.ray.executor import RayOptions, ray_backend

        return ray_backend(RayOptions())
    # fork: a few times quicker to start than spawn on a loaded machine
    local = name == "processes+local"
    return process_backend(ProcessOptions(start_method="fork", local_worker=local))


def executor_class(name: str) -> type:
    if name == "local":
        return LocalExecutor
    if name == "ray":
        from gymvec.backends.ray.executor import RayExecutor

        return RayExecutor
    from gymvec.backends.processes.executor import ProcessExecutor

    return ProcessExecutor


def make_engine(name: str, timeout: float | None = None, **special: dict) -> BatchEngine:
    """Four ProbeEnvs on two groups, sub-env ``i`` labelled ``i``; ``special[f"env{i}"]`` adds
    keyword arguments to sub-env ``i``'s."""
    kwargs = [{"label": i, **special.get(f"env{i}", {})} for i in range(N)]
    factories = SubEnvFactories(WORKERS, make_probe, kwargs, PER_WORKER, tasks=False)
    engine = BatchEngine(factories, backend_of(name), timeout=timeout)
    assert isinstance(engine.executor, executor_class(name))
    return engine


def reference() -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv(
        [make_cartpole] * N, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
    )


def transition(engine: BatchEngine) -> tuple:
    nxt = engine.buffers.next
    return (
        nxt.obs[OBS].copy(),
        nxt.reward.copy(),
        nxt.terminated.copy(),
        nxt.truncated.copy(),
    )


def assert_same(got: tuple, want: tuple, row: int | None = None) -> None:
    """``got`` (a batch's transition) equals ``want`` (one of the batch, or of sub-env ``row``)."""
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g if row is None else g[row], w)


def step_both(engine: BatchEngine, envs: gym.vector.SyncVectorEnv, actions: np.ndarray) -> None:
    engine.buffers.action[ACTION][:] = actions
    engine.step(AutoresetMode.NEXT_STEP)
    obs, reward, terminated, truncated, _ = envs.step(actions)
    assert_same(transition(engine), (obs, reward, terminated, truncated))


@every(EXECUTORS)
def test_steps_and_resets_match_gymnasium(executor, no_leaks):
    engine, envs = make_engine(executor), reference()
    try:
        engine.reset(seeds=[7, 8, 9, 10], into="next")
        obs, _ = envs.reset(seed=7)
        np.testing.assert_array_equal(engine.buffers.next.obs[OBS], obs)
        actions = np.random.default_rng(0).integers(0, 2, size=(30, N))
        for step_actions in actions:  # episodes of 8 steps: several autoresets each
            step_both(engine, envs, step_actions)
        # a reset into the root: every sub-env's current observation is there
        engine.reset(seeds=[1, 2, 3, 4])
        obs, _ = envs.reset(seed=1)
        np.testing.assert_array_equal(engine.buffers.root.obs[OBS], obs)
    finally:
        engine.close()
        envs.close()


@every(EXECUTORS)
def test_a_masked_reset_leaves_the_other_sub_envs_running(executor, no_leaks):
    engine, envs = make_engine(executor), reference()
    mask = np.array([False, True, True, False])  # one row of each group
    try:
        engine.reset(seeds=[0, 1, 2, 3], into="next")
        envs.reset(seed=0)
        actions = np.random.default_rng(1).integers(0, 2, size=(12, N))
        for step_actions in actions[:3]:
            step_both(engine, envs, step_actions)
        received = engine.reset(mask, seeds=[50, 51, 52, 53], into="next")
        np.testing.assert_array_equal(received.mask, mask)
        obs, _ = envs.reset(seed=[50, 51, 52, 53], options={"reset_mask": mask})
        np.testing.assert_array_equal(engine.buffers.next.obs[OBS][mask], obs[mask])
        # the unmasked sub-envs went on from where they were, the masked ones from the reset
        for step_actions in actions[3:]:
            step_both(engine, envs, step_actions)
    finally:
        engine.close()
        envs.close()


@every(EXECUTORS)
def test_requests_answer_per_index_in_the_order_asked(executor, no_leaks):
    engine = make_engine(executor)
    try:
        engine.reset(seeds=[0, 1, 2, 3])
        assert engine.request("get_attr", [3, 0, 2], name="label") == [3, 0, 2]
        assert engine.request("call", [2, 1], name="scaled", args=(10,)) == [20, 10]
        engine.request("set_attr", [1, 3], name="label", values=[100, 300])
        assert engine.request("get_attr", None, name="label") == [0, 100, 2, 300]
        assert engine.request("is_callable", [0, 0], name="scaled") == [True, True]
        # where each sub-env lives: one process per group, this one where the group is local
        pids = engine.request("call", None, name="pid")
        groups = [pids[start:stop] for start, stop in engine.executor.bounds]
        assert all(len(set(group)) == 1 for group in groups)
        local_rows = len(engine.local_envs())
        assert local_rows == {"local": N, "processes+local": PER_WORKER}.get(executor, 0)
        assert [pid == os.getpid() for pid in pids] == [i < local_rows for i in range(N)]
        assert len(set(pids)) == (1 if executor == "local" else WORKERS)
    finally:
        engine.close()


def first_ready_rollout(engine: BatchEngine, sends: list[list[int]]) -> None:
    """Ten first-ready steps of every sub-env (sent in ``sends``, in order), checked against
    gymnasium envs of their own; sub-env 3's second step is slow, and the others must come
    back while it runs."""
    # one reference env per sub-env, which resets at the step after an episode's end
    singles = [gym.wrappers.Autoreset(make_cartpole()) for _ in range(N)]
    try:
        engine.async_reset_send(None, seeds=[4, 5, 6, 7], into="next")
        ready = engine.async_recv("reset", min_get=N)
        assert sorted(ready.indices.tolist()) == list(range(N))
        for i, env in enumerate(singles):
            obs, _ = env.reset(seed=4 + i)
            np.testing.assert_array_equal(engine.buffers.next.obs[OBS][i], obs)
        actions = np.random.default_rng(2).integers(0, 2, size=(10, N))
        for step, step_actions in enumerate(actions):
            engine.buffers.action[ACTION][:] = step_actions
            for rows in sends:
                engine.async_step_send(rows, AutoresetMode.NEXT_STEP)
            if step == 1:  # the three fast ones come back while sub-env 3 still sleeps
                start = time.monotonic()
                ready = engine.async_recv("step", min_get=N - 1)
                assert sorted(ready.indices.tolist()) == [0, 1, 2]
                assert time.monotonic() - start < STALL_S * 0.75
                assert engine.flying.tolist() == [3]
                assert engine.async_recv("step", min_get=1).indices.tolist() == [3]
            else:
                engine.async_recv("step", min_get=N)
            for i, env in enumerate(singles):
                obs, reward, terminated, truncated, _ = env.step(int(step_actions[i]))
                assert_same(transition(engine), (obs, reward, terminated, truncated), row=i)
        assert engine.flying.size == 0
    finally:
        for env in singles:
            env.close()


STALL_S = 2.0


@every(EXECUTORS)
def test_first_ready_takes_back_sub_envs_without_waiting_for_a_slow_one(executor, no_leaks):
    engine = make_engine(executor, env3={"stall_at": (2, STALL_S)})
    try:
        first_ready_rollout(engine, sends=[[0, 1, 2], [3]])
    finally:
        engine.close()


@every(EXECUTORS)
def test_first_ready_rows_of_one_send_finish_one_by_one(executor, request, no_leaks):
    # The contract: a row is finished as soon as its own command is, whatever the other rows
    # of its group do; here sub-env 2 shares sub-env 3's group and its send.
    if executor == "ray":
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="RayExecutor answers per remote call: the rows one send_some gives an "
                "actor come back together (docs/architecture.md, Ray)",
            )
        )
    engine = make_engine(executor, env3={"stall_at": (2, STALL_S)})
    try:
        first_ready_rollout(engine, sends=[[0, 1, 2, 3]])
    finally:
        engine.close()


def step_until_sub_env_2_raises(engine: BatchEngine) -> BaseException:
    """Steps a batch whose sub-env 2 raises in its third step; returns what that raised."""
    engine.reset(seeds=[0, 1, 2, 3], into="next")
    engine.buffers.action[ACTION][:] = 0
    engine.step(AutoresetMode.NEXT_STEP)
    engine.step(AutoresetMode.NEXT_STEP)
    with pytest.raises(ValueError) as caught:  # the sub-env's own class, wherever it ran
        engine.step(AutoresetMode.NEXT_STEP)
    assert "probe 2: step 3 failed on purpose" in str(caught.value)
    return caught.value


@every(EXECUTORS)
def test_a_sub_env_that_raises_reaches_the_caller_and_the_batch_goes_on(executor, no_leaks):
    engine = make_engine(executor, env2={"fail_at": 3})
    try:
        step_until_sub_env_2_raises(engine)
        # the command is over: a reset makes every sub-env known again, and the batch steps
        engine.reset(seeds=[0, 1, 2, 3], into="next")
        engine.step(AutoresetMode.NEXT_STEP)
        assert engine.request("get_attr", [2], name="label") == [2]
    finally:
        engine.close()


@every(EXECUTORS)
def test_a_sub_env_that_raises_is_a_worker_error_naming_it(executor, no_leaks):
    engine = make_engine(executor, env2={"fail_at": 3})
    try:
        error = step_until_sub_env_2_raises(engine)
        assert isinstance(error, WorkerError)
        assert re.search(r"sub-env 2\b", str(error))
    finally:
        engine.close()


@every(EXECUTORS)
def test_close_ends_every_process_and_refuses_further_calls(executor, no_leaks):
    engine = make_engine(executor)
    engine.reset(seeds=[0, 1, 2, 3])
    pids = set(engine.request("call", None, name="pid")) - {os.getpid()}
    engine.close()
    engine.close()  # twice is harmless
    with pytest.raises(ClosedEnvError):
        engine.reset()
    assert not any(alive_after(pid, 15.0) for pid in pids)


@every(REMOTE)
def test_a_hung_sub_env_times_out_and_close_ends_it(executor, no_leaks):
    # sub-env 3: in a worker process for each of these executors
    engine = make_engine(executor, timeout=1.0, env3={"stall_at": (1, 600.0)})
    pids = set()
    try:
        engine.reset(seeds=[0, 1, 2, 3])
        pids = set(engine.request("call", None, name="pid")) - {os.getpid()}
        engine.buffers.action[ACTION][:] = 0
        start = time.monotonic()
        with pytest.raises(SubEnvTimeoutError) as caught:
            engine.step(AutoresetMode.NEXT_STEP)
        assert time.monotonic() - start < 10.0
        assert any(3 in rows for _, _, rows in caught.value.busy)
        with pytest.raises(RuntimeError, match="timed out"):  # the engine is stuck now
            engine.reset()
    finally:
        start = time.monotonic()
        engine.close()
        assert time.monotonic() - start < 20.0
    assert not any(alive_after(pid, 15.0) for pid in pids)


def alive_after(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` still runs after up to ``seconds`` (a zombie counts as gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return False
        except FileNotFoundError:
            return False
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)  # leave nothing behind, even when the test fails
    return True
