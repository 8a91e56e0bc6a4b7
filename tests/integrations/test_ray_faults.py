"""Faults that heal on Ray actors (API section 13), on a local Ray (loopback only): a sub-env
that raises inside an actor is rebuilt there, and a dead actor (``ray.kill`` from outside) gets
a new actor in its place; the faulted rows read as truncated with their last observation and
``infos["fault"]``, and every other row equals gymnasium's SyncVectorEnv over the same envs
without the fault, step for step."""

from __future__ import annotations

import functools
import os
import time

# Before Ray is imported: every Ray process then binds 127.0.0.1 (as in test_ray.py)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

ray = pytest.importorskip("ray")

import gymvec  # noqa: E402
from gymvec.vector.vector_env import GymnasiumVectorEnv  # noqa: E402
from tests import _heal  # noqa: E402
from tests._flaky_envs import exit_now, flaky_fns, healthy_fns  # noqa: E402

N, STEPS = 4, 24
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    from test_ray import start_local_ray

    start_local_ray(num_cpus=4)
    yield
    ray.shutdown()


def ray_face(
    fns: list, mode: str, on_fault: object = "restart", placement: str | None = None
) -> GymnasiumVectorEnv:
    env = gymvec.RayEnv(2, fns, envs_per_worker=2, placement=placement, on_fault=on_fault)
    return GymnasiumVectorEnv(env, autoreset_mode=mode)


def actions(t: int) -> np.ndarray:
    return _heal.actions(t, N)


def run(envs, mode: str, before_step=None) -> list:
    return _heal.run(envs, mode, STEPS, before_step)


def check(got: list, mode: str, faulted_rows: list[int], message: str) -> int:
    return _heal.check_faulted_run(
        got, _heal.reference(mode, N, STEPS), mode, faulted_rows, message
    )


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_a_sub_env_that_raises_in_an_actor_heals_there(mode):
    envs = ray_face(flaky_fns(N, 1, 7), mode)
    try:
        got = run(envs, mode)
        restarts, faults = envs.restarts, envs.faults
    finally:
        envs.close()
    faulted = check(got, mode, [1], "raise fault on purpose")
    assert faulted >= 2 and restarts.tolist() == [0, faulted, 0, 0]
    assert {f.kind for f in faults} == {"error"} and {f.worker for f in faults} == {0}


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_a_killed_actor_starts_again_and_the_others_run_as_without_it(mode):
    # NEXT_STEP with a placement group: the new actor takes the dead one's bundle
    envs = ray_face(healthy_fns(N), mode, placement="spread" if mode == "next_step" else None)
    executor = envs.engine.executor
    killed = []

    def kill(t: int) -> None:
        if t in (4, 14):
            killed.append(executor.handles[0].actor)
            ray.kill(killed[-1])

    try:
        got = run(envs, mode, before_step=kill)
        restarts, faults = envs.restarts, envs.faults
        assert executor.handles[0].actor is not killed[-1]
        assert envs.engine.request("apply", [0], fn=lambda env: "alive") == ["alive"]
    finally:
        envs.close()
    faulted = check(got, mode, [0, 1], "worker 0 (Ray actor on node")
    assert faulted == 2 and restarts.tolist() == [2, 2, 0, 0]
    assert {f.kind for f in faults} == {"death"} and {f.worker for f in faults} == {0}
    assert all(f.traceback is None for f in faults)


def test_an_actor_that_dies_in_a_request_starts_again_at_the_next_command():
    envs = ray_face(healthy_fns(N), "next_step")

    def die(t: int) -> None:
        if t in (4, 12):  # the request fails; the next step starts actor 1 again
            with pytest.raises(gymvec.WorkerError, match="worker 1 .* died"):
                envs.apply(exit_now, indices=[2])

    try:
        got = run(envs, "next_step", before_step=die)
        restarts, faults = envs.restarts, envs.faults
    finally:
        envs.close()
    faulted = check(got, "next_step", [2, 3], "worker 1 (Ray actor on node")
    assert faulted == 2 and restarts.tolist() == [0, 0, 2, 2]
    assert {(f.kind, f.worker) for f in faults} == {("death", 1)}


def test_past_the_limit_a_dead_actor_raises_worker_error():
    envs = ray_face(healthy_fns(N), "next_step", on_fault=gymvec.Restart(limit=1))
    executor = envs.engine.executor
    try:
        envs.reset(seed=1)
        ray.kill(executor.handles[1].actor)
        for t in range(3):  # the first restart is within the limit
            envs.step(actions(t))
        assert envs.restarts.tolist() == [0, 0, 1, 1]
        ray.kill(executor.handles[1].actor)
        with pytest.raises(gymvec.WorkerError, match="sub-env 2") as info:
            for t in range(3):
                envs.step(actions(t))
        assert info.value.worker_index == 1
    finally:
        envs.close()


class HangsAtStep(gym.Wrapper):
    """CartPole whose ``at``-th step of its life sleeps far past any test's timeout."""

    def __init__(self, at: int = 0):
        super().__init__(gym.make("CartPole-v1"))
        self.at, self.steps = at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at:
            time.sleep(3600)
        return self.env.step(action)


def test_an_actor_past_the_timeout_is_ended_and_starts_again():
    fns = [functools.partial(HangsAtStep, 5 if i == 3 else 0) for i in range(N)]
    env = gymvec.RayEnv(2, fns, envs_per_worker=2, placement=None, on_fault="restart", timeout=3.0)
    envs = GymnasiumVectorEnv(env)
    try:
        envs.reset(seed=3)
        for t in range(8):
            _, _, _, truncated, infos = envs.step(actions(t))
            if t == 4:
                assert infos["_fault"].tolist() == [False, False, True, True]
                assert truncated[2:].all() and "timed out after 3.0 s" in infos["fault"][3]
        assert envs.restarts.tolist() == [0, 0, 1, 1]
        assert [(f.kind, f.sub_env) for f in envs.faults] == [("timeout", 2), ("timeout", 3)]
    finally:
        envs.close()


def test_a_process_beside_an_actor_that_dies_starts_again_in_the_actor():
    # worker_processes=2: each actor steps row 0 of its share itself, row 1 in a process of
    # its own, which exits at its 7th step; the actor's executor starts it again
    env = gymvec.RayEnv(
        2,
        flaky_fns(N, 1, 7, "exit"),
        envs_per_worker=2,
        worker_processes=2,
        placement=None,
        on_fault="restart",
    )
    envs = GymnasiumVectorEnv(env, autoreset_mode="next_step")
    actors = [handle.actor for handle in envs.engine.executor.handles]
    try:
        got = run(envs, "next_step")
        restarts, faults = envs.restarts, envs.faults
        assert [handle.actor for handle in envs.engine.executor.handles] == actors
    finally:
        envs.close()
    faulted = check(got, "next_step", [1], "worker died: exit code 3")
    assert faulted >= 2 and restarts.tolist() == [0, faulted, 0, 0]
    assert {(f.kind, f.worker, f.sub_env) for f in faults} == {("death", 0, 1)}


def first_ready_run(envs, recvs: int, before_recv=None, until=None) -> list[list]:
    """Per sub-env, its (obs, reward, terminated, truncated, fault message or None) in the
    order received over ``recvs`` first-ready batches (or until ``until(per_env)``); each
    sub-env's ``t``-th action is ``actions(t)``'s, so its trajectory does not depend on which
    sub-envs share a batch."""
    per_env: list[list] = [[] for _ in range(N)]
    envs.async_reset(seed=11)
    for k in range(recvs):
        if until is not None and until(per_env):
            break
        if before_recv is not None:
            before_recv(k)
        obs, rew, term, trunc, infos = envs.recv()
        ids = infos["env_id"].tolist()
        for j, i in enumerate(ids):
            fault = infos["fault"][j] if infos.get("_fault", np.zeros(N))[j] else None
            per_env[i].append((obs[j].copy(), float(rew[j]), bool(term[j]), bool(trunc[j]), fault))
        envs.send(np.array([actions(len(per_env[i]) - 1)[i] for i in ids]), np.array(ids))
    return per_env


def check_first_ready(got: list, others: list[int], faulted: list[int], n: int, message: str):
    """``others``' rows as gymnasium's over the same envs, step for step, without a fault;
    each of ``faulted``'s rows faulted ``n`` times (``message`` in each), each fault its last
    observation, truncated, reward 0, then the rebuilt sub-env's reset."""
    want = _heal.reference("next_step", N, max(len(got[i]) for i in others))
    for i in others:
        assert len(got[i]) >= 10 and not any(entry[4] for entry in got[i])
        for t, entry in enumerate(got[i]):
            np.testing.assert_array_equal(entry[0], want[t][0][i])
            if t:
                assert entry[1:4] == tuple(want[t][k][i] for k in (1, 2, 3))
    for i in faulted:
        rows = got[i]
        marks = [t for t, entry in enumerate(rows) if entry[4] is not None]
        assert len(marks) == n, rows
        for t in marks:
            assert message in rows[t][4] and rows[t][1:4] == (0.0, False, True)
            np.testing.assert_array_equal(rows[t][0], rows[t - 1][0])
            if t + 1 < len(rows):
                assert rows[t + 1][1:4] == (0.0, False, False)


def test_an_actor_killed_in_first_ready_batches_starts_again_while_the_others_flow():
    env = gymvec.RayEnv(2, healthy_fns(N), envs_per_worker=2, placement=None, on_fault="restart")
    envs = GymnasiumVectorEnv(env, batch_size=2)
    executor = envs.engine.executor

    def kill(k: int) -> None:
        if k in (6, 18):  # actor 0, with some of its rows in flight (or all)
            ray.kill(executor.handles[0].actor)

    try:
        got = first_ready_run(envs, 40, kill)
        restarts, faults = envs.restarts, envs.faults
    finally:
        envs.close()
    check_first_ready(got, [2, 3], [0, 1], 2, "worker 0 (Ray actor on node")
    assert all("died" in entry[4] for i in (0, 1) for entry in got[i] if entry[4])
    assert restarts.tolist() == [2, 2, 0, 0]
    assert {(f.kind, f.worker) for f in faults} == {("death", 0)}


def kill_now(actor) -> None:
    """``ray.kill``, waited out: the kill is asynchronous, a call made at once may still run."""
    ray.kill(actor)
    for _ in range(200):
        try:
            ray.get(actor.ping.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def test_first_ready_tensordict_steps_flag_a_killed_actors_rows():
    """``async_step_recv``: actor 0, killed, starts again; its rows come back flagged
    (``("next", "fault")``), truncated and done, reward 0, the observation they were sent
    with; actor 1's rows as gymnasium's over the same envs."""
    import torch
    from tensordict import TensorDict

    env = gymvec.RayEnv(2, healthy_fns(N), envs_per_worker=2, placement=None, on_fault="restart")
    want = _heal.reference("next_step", N, 2)
    try:
        env.set_seed(11)
        td = env.reset()
        kill_now(env.engine.executor.handles[0].actor)
        td.set("action", torch.as_tensor(actions(0)))
        env.async_step_send(td)
        out = env.async_step_recv(min_get=N)
        got = out["next"][torch.argsort(out["env_index"])]
        assert got["fault"].reshape(-1).tolist() == [True, True, False, False]
        assert got["truncated"][:2].all() and got["done"][:2].all()
        assert not got["terminated"][:2].any() and got["reward"][:2].sum().item() == 0.0
        torch.testing.assert_close(got["observation"][:2], td["observation"][:2])
        np.testing.assert_array_equal(got["observation"][2:].numpy(), want[1][0][2:])
        np.testing.assert_array_equal(got["reward"][2:].reshape(-1).numpy(), want[1][1][2:])
        env.async_reset_send(TensorDict({"env_index": torch.tensor([0, 1])}, batch_size=[2]))
        reset = env.async_reset_recv(min_get=2)
        assert not reset["fault"].any()
        assert env.restarts.tolist() == [1, 1, 0, 0]
        assert [(f.kind, f.sub_env) for f in env.faults] == [("death", 0), ("death", 1)]
    finally:
        env.close()


def hung_actor_face(on_fault: str) -> GymnasiumVectorEnv:
    """First-ready batches of 2 over 4 sub-envs; sub-env 3 (actor 1) hangs at its 5th step."""
    fns = [functools.partial(HangsAtStep, 5 if i == 3 else 0) for i in range(N)]
    env = gymvec.RayEnv(2, fns, envs_per_worker=2, placement=None, on_fault=on_fault, timeout=2.0)
    return GymnasiumVectorEnv(env, batch_size=2)


def test_an_actor_hung_in_first_ready_batches_starts_again_while_the_others_flow():
    envs = hung_actor_face("restart")

    def healed(per_env: list) -> bool:  # rows 2 and 3: a fault, and a row after it
        return all(any(e[4] for e in per_env[i][:-1]) for i in (2, 3))

    try:
        got = first_ready_run(envs, 10**6, until=healed)
        restarts, faults = envs.restarts, envs.faults
    finally:
        envs.close()
    check_first_ready(got, [0, 1], [2, 3], 1, "timed out after 2.0 s")
    assert restarts.tolist() == [0, 0, 1, 1]
    assert {(f.kind, f.worker) for f in faults} == {("timeout", 1)}


def test_without_restart_an_actor_hung_in_first_ready_batches_is_a_timeout():
    envs = hung_actor_face("raise")
    try:
        with pytest.raises(gymvec.SubEnvTimeoutError, match="past the timeout of 2.0 s") as info:
            first_ready_run(envs, 10**6)
        assert "workers [1]" in str(info.value)
    finally:
        envs.close()
