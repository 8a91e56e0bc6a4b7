"""First-ready batches: some sub-envs stepped or reset, whichever finish first taken back.

Both sides (the engine's ``async_*`` verbs under the tensordict API's ``async_step_send``/
``async_step_recv``/``async_reset_send``/``async_reset_recv`` and the gymnasium face's
``async_reset``/``send``/``recv``), on the serial backend and on worker processes with several
sub-envs per worker, with and without a share stepped in this process. Trajectories are
checked by replaying every sub-env alone (a plain gymnasium env, same seed, same actions), so
they hold whatever order the sub-envs finished in. Process tests use fork (cheap) and few
processes; waits have slack for a loaded machine.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import _face_envs
import gymnasium as gym
import numpy as np
import pytest
import torch
from _envs import TimedEnv
from _replay import next_step_alone
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from gymvec import (
    GymEnv,
    ParallelEnv,
    ParallelVectorEnv,
    SerialEnv,
    SerialVectorEnv,
    UnsupportedSpaceError,
    WorkerError,
)
from gymvec.bench.envs import LATENCY_ID
from gymvec.engine import (
    BatchEngine,
    ProcessOptions,
    SubEnvFactories,
    process_backend,
    serial_backend,
)
from gymvec.integrations.make_vec import make_vec

FORK = {"mp_start_method": "fork"}
MEAN_S = 2e-3  # the latency env's mean step time: enough for arrivals to change order
EPISODE = 6  # short episodes: every sub-env ends some of them (autoreset, explicit resets)

# (num_workers, envs_per_worker, local_worker) of the process layouts under test
LAYOUTS = [(2, 2, False), (2, 2, True), (3, 1, False)]


def make_latency(**kwargs) -> gym.Env:
    return gym.make(LATENCY_ID, mean_seconds=MEAN_S, episode_steps=EPISODE, **kwargs)


def latency_fns(n: int) -> list:
    return [make_latency] * n


def replay_face(seed: int, actions: list, records: list) -> None:
    """Sub-env alone (gymnasium's NEXT_STEP autoreset by hand) against what recv returned:
    ``records[0]`` is its reset, ``records[k]`` its answer to ``actions[k - 1]``."""
    expected = [record[:4] for record in next_step_alone(make_latency(), seed, actions)]
    assert len(expected) == len(records)
    for k, (want, got) in enumerate(zip(expected, records)):
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"observation {k}")
        assert got[1:] == pytest.approx(want[1:]) and tuple(map(bool, got[2:])) == want[2:], k


def collect_face(envs, n: int, rounds: int, seed: int) -> tuple[dict, dict, list]:
    """``rounds`` recv/send rounds of random actions; per sub-env its actions and records."""
    rng = np.random.default_rng(seed)
    actions: dict[int, list] = {i: [] for i in range(n)}
    records: dict[int, list] = {i: [] for i in range(n)}
    batches = []
    envs.async_reset(seed=seed)
    for _ in range(rounds):
        obs, rewards, terminations, truncations, infos = envs.recv()
        env_id = infos["env_id"]
        assert env_id.dtype == np.int32 and len(env_id) == envs.batch_size
        assert obs.shape == (envs.batch_size, 4) and rewards.dtype == np.float64
        batches.append(env_id.tolist())
        for row, i in enumerate(env_id.tolist()):
            records[i].append((obs[row], rewards[row], terminations[row], truncations[row]))
        chosen = rng.integers(0, 2, size=len(env_id))
        for i, action in zip(env_id.tolist(), chosen.tolist()):
            actions[i].append(action)
        envs.send(chosen, env_id)
    # the last actions sent are still in flight: their results are not recorded
    for i in range(n):
        if len(actions[i]) == len(records[i]):
            actions[i].pop()
    return actions, records, batches


# ---- the gymnasium face -----------------------------------------------------------------------
def face_envs(kind: str, n: int, batch_size: int):
    if kind == "serial":
        return SerialVectorEnv(latency_fns(n), batch_size=batch_size)
    workers, local = {"parallel": (2, False), "parallel-local": (2, True)}[kind]
    return ParallelVectorEnv(
        latency_fns(n), batch_size=batch_size, num_workers=workers, local_worker=local,
        context="fork",
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["serial", "parallel", "parallel-local"])
def test_face_trajectories_are_those_of_each_sub_env_alone(kind, no_leaks):
    n = 4
    envs = face_envs(kind, n, batch_size=2)
    try:
        actions, records, batches = collect_face(envs, n, rounds=30, seed=7)
    finally:
        envs.close()
    for i in range(n):
        assert len(records[i]) > 3, f"sub-env {i} was barely stepped: {batches}"
        replay_face(7 + i, actions[i], records[i])
    # NEXT_STEP: some episode ended and was reset within the run
    assert any(rec[2] or rec[3] for recs in records.values() for rec in recs)


def test_face_recv_infos_are_rows_of_env_id():
    envs = SerialVectorEnv(latency_fns(3), batch_size=2)
    envs.async_reset(seed=0)
    envs.recv()  # the resets of sub-envs 0 and 1
    envs.send(np.array([1, 0]), np.array([0, 1]))
    _, _, _, _, infos = envs.recv()  # sub-env 2's reset, then one step
    ids = infos["env_id"].tolist()
    assert ids[0] == 2 and set(infos) >= {"env_id", "delay", "_delay"}
    assert infos["_delay"].tolist() == [False, True]  # a reset reports no delay, a step does
    assert infos["delay"][1] > 0
    envs.close()


@pytest.mark.parametrize("kind", ["serial", "parallel", "parallel-local"])
def test_face_learns_info_fields_while_rows_are_in_flight(kind, no_leaks):
    # LatencyEnv reports info["delay"] from its own seeded RNG at every step: the first steps
    # give "delay" a buffer field while other rows run, and every row's value stays its own.
    n, seed = 4, 3
    envs = face_envs(kind, n, batch_size=2)
    delays: dict[int, list] = {i: [] for i in range(n)}
    sent: dict[int, list] = {i: [] for i in range(n)}
    try:
        envs.async_reset(seed=seed)
        for _ in range(24):
            infos = envs.recv()[-1]
            present = infos.get("_delay", np.zeros(envs.batch_size, dtype=bool))
            for row, i in enumerate(infos["env_id"].tolist()):
                if len(sent[i]) > len(delays[i]):  # the answer to a step (or its autoreset)
                    delays[i].append(infos["delay"][row] if present[row] else None)
            ids = infos["env_id"]
            for i in ids.tolist():
                sent[i].append(1)
            envs.send(np.ones(len(ids), dtype=np.int64), ids)
        assert "delay" in envs.engine.layout.info_fields
        engine = envs.engine
        while engine.flying.size:  # the last sends; then a request and whole-batch commands
            envs.recv()
        assert envs.get_attr("mean_seconds") == (MEAN_S,) * n
        engine.reset()
        engine.buffers.action[("action",)][:] = 1
        engine.step(AutoresetMode.DISABLED)
        assert (engine.buffers.next.info["delay"] > 0).all()
    finally:
        envs.close()
    for i in range(n):  # each sub-env alone: its step delays, None where NEXT_STEP reset it
        alone = next_step_alone(make_latency(), seed + i, [1] * len(delays[i]))
        expected = [None if info is None else info["delay"] for *_, info in alone[1:]]
        assert delays[i] == expected, i
        assert len(delays[i]) > 3


def make_text_env() -> gym.Env:
    text_obs = gym.spaces.Dict({"text": gym.spaces.Text(5), "x": gym.spaces.Box(-1, 1, (2,))})
    return _face_envs.SpacesEnv(text_obs, gym.spaces.Discrete(2))


@pytest.mark.parametrize("kind", ["serial", "parallel", "parallel-local"])
def test_face_object_observations_come_back_with_their_rows(kind, no_leaks):
    # A Text leaf has no fixed shape: its values travel beside the buffers (on the worker's
    # pipe, with each sub-env's answer); each batch holds those of its own rows.
    n, seed = 4, 11
    if kind == "serial":
        envs = SerialVectorEnv([make_text_env] * n, batch_size=2)
    else:
        envs = ParallelVectorEnv(
            [make_text_env] * n, batch_size=2, num_workers=2, local_worker=kind != "parallel",
            shared_memory=False, context="fork",
        )  # fmt: skip
    records: dict[int, list] = {i: [] for i in range(n)}
    try:
        envs.async_reset(seed=seed)
        # Which rows finish first is up to the scheduler (rows of this process often win):
        # batches come until every sub-env has a few, within a bound that starvation would hit.
        for _ in range(400):
            if min(len(rows) for rows in records.values()) > 3:
                break
            obs, _, _, _, infos = envs.recv()
            ids = infos["env_id"]
            assert isinstance(obs["text"], tuple) and obs["x"].shape == (2, 2)
            for row, i in enumerate(ids.tolist()):
                records[i].append((obs["text"][row], obs["x"][row]))
            envs.send(np.ones(len(ids), dtype=np.int64), ids)
    finally:
        envs.close()
    for i in range(n):
        alone = next_step_alone(make_text_env(), seed + i, [1] * (len(records[i]) - 1))
        assert len(records[i]) > 3
        for (text, x), (want, *_) in zip(records[i], alone):
            assert text == want["text"]
            np.testing.assert_array_equal(x, want["x"])


def test_object_actions_are_refused_in_first_ready_sends(no_leaks):
    def make_text_actions() -> gym.Env:
        return _face_envs.SpacesEnv(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Text(3))

    envs = ParallelVectorEnv(
        [make_text_actions] * 2, batch_size=1, num_workers=2, shared_memory=False,
        context="fork",
    )  # fmt: skip
    try:  # refused at the first command, before anything is sent
        with pytest.raises(UnsupportedSpaceError, match="need actions of fixed shape"):
            envs.async_reset(seed=0)
        assert not envs.engine.flying.size
        obs, _ = envs.reset(seed=0)  # whole-batch commands carry them
        assert obs.shape == (2, 2)
    finally:
        envs.close()


def test_face_make_vec_batch_size_and_step():
    envs = make_vec(LATENCY_ID, 3, backend="serial", batch_size=3, mean_seconds=0.0)
    envs.reset(seed=0)
    obs, *_ = envs.step(np.zeros(3, dtype=np.int64))  # M == N: lock-step still works
    assert obs.shape == (3, 4)
    envs.close()
    envs = make_vec(LATENCY_ID, 3, batch_size=2, num_workers=1, context="fork")
    try:
        assert envs.batch_size == 2
        envs.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"send\(actions, env_id\) and\s+recv\(\)"):
            envs.step(np.zeros(3, dtype=np.int64))
        envs.async_reset(seed=0)
        assert len(envs.recv()[-1]["env_id"]) == 2
    finally:
        envs.close()


def test_face_bad_batch_size_and_modes():
    with pytest.raises(ValueError, match="batch_size: expected 1 to num_envs=2, got 3"):
        SerialVectorEnv(latency_fns(2), batch_size=3)
    with pytest.raises(ValueError, match="needs autoreset_mode NEXT_STEP"):
        SerialVectorEnv(latency_fns(2), batch_size=1, autoreset_mode="same_step")
    envs = SerialVectorEnv(latency_fns(2), autoreset_mode="same_step")
    with pytest.raises(RuntimeError, match="take autoreset_mode NEXT_STEP"):
        envs.async_reset()
    envs.close()


def test_face_errors_name_what_is_wrong():
    envs = SerialVectorEnv(latency_fns(3), batch_size=2)
    with pytest.raises(RuntimeError, match="no first-ready command in flight"):
        envs.recv()
    envs.async_reset(seed=0)
    with pytest.raises(ValueError, match=r"sub-envs \[0, 1, 2\] are still in flight"):
        envs.send(np.zeros(3, dtype=np.int64))
    _, _, _, _, infos = envs.recv()
    with pytest.raises(ValueError, match=r"expected shape \(2,\)"):
        envs.send(np.zeros(3, dtype=np.int64), infos["env_id"])
    with pytest.raises(ValueError, match="expected values in Discrete"):
        envs.send(np.array([0, 5]), infos["env_id"])
    with pytest.raises(ValueError, match=r"sub-envs \[2\] are still in flight"):
        envs.send(np.array([0, 1]), np.array([0, 2]))
    with pytest.raises(RuntimeError, match="first-ready commands are in flight"):
        envs.reset()  # a whole-batch reset waits until every result is taken back
    envs.close()


class LateFailingEnv(gym.Env):
    """Steps at once, or (``bad``) after ``LATE_S`` seconds by raising."""

    LATE_S = 0.2
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad: bool):
        self.bad = bad

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.bad:
            time.sleep(self.LATE_S)
            raise ValueError("failing late on purpose")
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_face_a_late_error_and_its_worker_mate_come_back_while_fast_rows_cycle(no_leaks):
    """Sub-env 2 (worker 1, with sub-env 3) raises long after sub-envs 0 and 1 answer: they
    cycle meanwhile (first-ready: no batch waits for the slow row), and the error, then sub-env
    3 queued behind it, still come back. A worker's error costs it a millisecond or more (its
    traceback is formatted), so a test may not expect it within a fixed number of batches;
    the loops here stop at a deadline instead, so that a lost row fails rather than hangs."""
    fns = [lambda i=i: LateFailingEnv(bad=i == 2) for i in range(4)]
    envs = ParallelVectorEnv(fns, num_workers=2, batch_size=2, local_worker=False, context="fork")
    try:
        envs.async_reset(seed=0)
        batches: list[list[int]] = []
        deadline = time.monotonic() + 30.0
        with pytest.raises(ValueError, match="failing late on purpose") as info:
            while time.monotonic() < deadline:
                *_, infos = envs.recv(timeout=30.0)
                batches.append(infos["env_id"].tolist())
                envs.send(np.zeros(2, np.int64), infos["env_id"])
        assert isinstance(info.value, WorkerError) and info.value.sub_env_index == 2
        sent_2 = next(k for k, batch in enumerate(batches) if 2 in batch)  # its step went then
        fast = [batch for batch in batches[sent_2 + 1 :] if sorted(batch) == [0, 1]]
        assert len(fast) >= 2, batches
        got: list[int] = []
        while 3 not in got and time.monotonic() < deadline:
            *_, infos = envs.recv(timeout=30.0)
            got = infos["env_id"].tolist()
            envs.send(np.zeros(2, np.int64), infos["env_id"])
        assert 3 in got, "sub-env 3, sent behind sub-env 2's failing step, never came back"
    finally:
        envs.close()


# ---- the tensordict API -------------------------------------------------------------------------
def td_env(kind: str, layout: tuple | None = None):
    if kind == "serial":
        return SerialEnv(4, lambda: GymEnv(make_latency()))
    workers, per_worker, local = layout
    return ParallelEnv(
        workers, lambda: GymEnv(make_latency()), envs_per_worker=per_worker,
        local_worker=local, **FORK,
    )  # fmt: skip


TD_CASES = [("serial", None)] + [("parallel", layout) for layout in LAYOUTS]


@pytest.mark.parametrize(("kind", "layout"), TD_CASES)
def test_td_trajectories_are_those_of_each_sub_env_alone(kind, layout, no_leaks):
    env = td_env(kind, layout)
    n = env.num_envs
    rng = np.random.default_rng(3)
    history: dict[int, list] = {i: [] for i in range(n)}  # ("reset", obs) / ("step", a, ...)
    try:
        env.set_seed(100)
        env.async_reset_send()
        ready = env.async_reset_recv(min_get=n)
        for row in range(len(ready)):
            history[int(ready["env_index"][row])].append(("reset", ready["observation"][row]))
        pending = ready
        for _ in range(25):
            actions = torch.from_numpy(rng.integers(0, 2, size=len(pending)))
            env.async_step_send(pending.select("env_index").set("action", actions))
            out = env.async_step_recv(min_get=1)
            assert out["next", "reward"].shape == (len(out), 1)
            done_rows = []
            for row in range(len(out)):
                i = int(out["env_index"][row])
                step = (int(out["action"][row]), out["next", "observation"][row])
                step += (float(out["next", "reward"][row]), bool(out["next", "terminated"][row]))
                step += (bool(out["next", "truncated"][row]),)
                history[i].append(("step", *step))
                if out["next", "done"][row]:
                    done_rows.append(i)
            pending = out.select("env_index")[~out["next", "done"].squeeze(-1)]
            if done_rows:  # explicit resets: no sub-env is reset behind the caller's back
                index = torch.tensor(done_rows)
                env.async_reset_send(TensorDict({"env_index": index}, [len(done_rows)]))
                ready = env.async_reset_recv(min_get=len(done_rows))
                for row in range(len(ready)):
                    i = int(ready["env_index"][row])
                    history[i].append(("reset", ready["observation"][row]))
                pending = torch.cat([pending, ready.select("env_index")])
        left = len(env.engine.flying)
        if left:
            env.async_step_recv(min_get=left)
    finally:
        env.close()
    assert sum(entry[0] == "reset" for h in history.values() for entry in h) > n
    for i in range(n):
        alone = make_latency()
        for k, entry in enumerate(history[i]):
            if entry[0] == "reset":
                obs, _ = alone.reset(seed=100 + i if k == 0 else None)
                np.testing.assert_array_equal(entry[1].numpy(), obs)
            else:
                _, action, obs, reward, terminated, truncated = entry
                want = alone.step(action)
                np.testing.assert_array_equal(obs.numpy(), want[0], err_msg=f"{i}: step {k}")
                assert (reward, terminated, truncated) == pytest.approx(want[1:4])


def test_td_step_and_reset_results_are_received_apart():
    env = SerialEnv(3, lambda: GymEnv(make_latency()))
    env.async_reset_send()
    root = env.async_reset_recv(min_get=3)
    first = root[:2].set("action", torch.zeros(2, dtype=torch.int64))
    env.async_step_send(first)
    env.async_reset_send(root[2:])
    out = env.async_step_recv(min_get=2)  # sub-env 2's reset, sent last, stays queued
    assert sorted(out["env_index"].tolist()) == [0, 1] and "next" in out.keys()
    with pytest.raises(RuntimeError, match="no first-ready step in flight"):
        env.async_step_recv()
    reset = env.async_reset_recv()
    assert reset["env_index"].tolist() == [2] and "next" not in reset.keys()
    with pytest.raises(RuntimeError, match="no first-ready reset in flight"):
        env.async_reset_recv()
    env.close()


def test_td_errors_name_what_is_wrong():
    env = SerialEnv(2, lambda: GymEnv(make_latency()))
    env.async_reset_send()
    with pytest.raises(ValueError, match=r"sub-envs \[0, 1\] are still in flight"):
        env.async_reset_send()
    with pytest.raises(ValueError, match="min_get: expected 1 to 2"):
        env.async_reset_recv(min_get=3)
    root = env.async_reset_recv(min_get=2)
    bad = root.clone().set("env_index", torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="each sub-env at most once"):
        env.async_step_send(bad.set("action", torch.zeros(2, dtype=torch.int64)))
    bad = root.clone().set("env_index", torch.tensor([0, 5]))
    with pytest.raises(IndexError, match=r"indices \[5\] out of range"):
        env.async_step_send(bad.set("action", torch.zeros(2, dtype=torch.int64)))
    bad = root.clone().set("env_index", torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="'env_index': expected an int64 tensor"):
        env.async_step_send(bad)
    with pytest.raises(ValueError, match="action"):
        env.async_step_send(root.clone().set("action", torch.zeros(2, dtype=torch.float32)))
    env.async_step_send(root.clone().set("action", torch.ones(2, dtype=torch.int64)))
    with pytest.raises(RuntimeError, match="first-ready commands are in flight"):
        env.step(env.rand_action())
    env.async_step_recv(min_get=2)
    env.step(env.rand_action())  # whole-batch steps again once every result is back
    env.close()


# ---- the engine: granularity, order, errors ---------------------------------------------------
def slow_engine(n: int, num_workers: int, local_worker: bool = False) -> BatchEngine:
    fns = [_face_envs.make_slow] * n
    factories = SubEnvFactories(num_workers, fns, None, n // num_workers)
    options = ProcessOptions(start_method="fork", local_worker=local_worker)
    return BatchEngine(factories, process_backend(options))


def send_sleeps(engine: BatchEngine, sleeps: dict[int, float]) -> None:
    """Step each sub-env of ``sleeps``, in its order, sleeping that long (SlowEnv)."""
    for i, seconds in sleeps.items():
        engine.buffers.action[("action",)][i] = seconds
        engine.async_step_send([i])


def test_a_worker_returns_each_sub_env_as_soon_as_it_finishes(no_leaks):
    engine = slow_engine(2, num_workers=1)  # one worker holds both
    try:
        engine.reset()
        send_sleeps(engine, {1: 0.0, 0: 1.0})
        first = engine.async_recv("step")
        assert first.indices.tolist() == [1]  # before the worker's other sub-env is done
        assert engine.flying.tolist() == [0]
        assert engine.async_recv("step").indices.tolist() == [0]
    finally:
        engine.close()


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_commands_queue_per_worker_in_the_order_sent(backend):
    factories = SubEnvFactories(1, [functools.partial(TimedEnv, 0.02)] * 3, None, 3)
    chosen = serial_backend() if backend == "serial" else process_backend(ProcessOptions("fork"))
    engine = BatchEngine(factories, chosen)
    try:
        engine.reset()
        for i in (2, 0, 1):
            engine.async_step_send([i])
        got = engine.async_recv("step", min_get=3)
        assert sorted(got.indices.tolist()) == [0, 1, 2]
        # (plain gymnasium sub-envs declare no info fields: their infos are extras)
        start = {i: got.extras[i].next["start"] for i in range(3)}
        end = {i: got.extras[i].next["end"] for i in range(3)}
        assert start[0] >= end[2] and start[1] >= end[0]
    finally:
        engine.close()


def test_timeout_loses_nothing(no_leaks):
    engine = slow_engine(2, num_workers=2)
    try:
        engine.reset()
        send_sleeps(engine, {0: 0.6})
        with pytest.raises(TimeoutError, match=r"sub-envs \[0\] \(workers \[0\]\) are still"):
            engine.async_recv(timeout=0.05)
        got = engine.async_recv(timeout=30.0)
        assert got.indices.tolist() == [0]
        assert engine.buffers.next.obs[("observation",)][0, 0] == pytest.approx(0.01)
    finally:
        engine.close()


def test_serial_timeout_is_checked_between_sub_envs_and_loses_nothing():
    factories = SubEnvFactories(1, [_face_envs.make_slow] * 2, None, 2)
    engine = BatchEngine(factories, serial_backend())
    engine.reset()
    send_sleeps(engine, {0: 0.2, 1: 0.2})
    with pytest.raises(TimeoutError, match="fewer than 2 sub-envs finished within 0.05 s"):
        engine.async_recv(min_get=2, timeout=0.05)  # sub-env 0 ran (nothing cuts it short)
    assert engine.flying.tolist() == [0, 1]
    got = engine.async_recv(min_get=2).indices.tolist()
    assert got == [0, 1]
    assert engine.buffers.next.obs[("observation",)][:, 0].tolist() == pytest.approx([0.01] * 2)
    engine.close()


def test_max_get_keeps_the_rest_for_later(no_leaks):
    factories = SubEnvFactories(1, make_latency, None, 3)
    engine = BatchEngine(factories, process_backend(ProcessOptions("fork")))
    try:
        engine.async_reset_send(into="next")
        time.sleep(0.3)  # all three finish meanwhile
        first = engine.async_recv(min_get=1, max_get=1).indices.tolist()
        assert len(first) == 1
        rest = engine.async_recv(min_get=2, timeout=0.0).indices.tolist()  # already here
        assert sorted(first + rest) == [0, 1, 2]
    finally:
        engine.close()


@pytest.mark.parametrize("local_worker", [False, True])
def test_a_sub_env_that_raises_leaves_the_others_in_flight(local_worker, no_leaks):
    factories = SubEnvFactories(2, [_face_envs.make_raising] * 4, None, 2)
    options = ProcessOptions("fork", local_worker=local_worker)
    engine = BatchEngine(factories, process_backend(options))
    try:
        engine.reset()
        engine.buffers.action[("action",)][:] = 0
        engine.step()
        engine.buffers.action[("action",)][:] = [0, 0, 1, 0]  # sub-env 2 raises
        engine.async_step_send([0, 1, 2, 3])
        received: list[int] = []
        with pytest.raises(ValueError, match="step failed on purpose") as info:
            while True:
                received += engine.async_recv("step").indices.tolist()
        assert isinstance(info.value, WorkerError)
        while len(engine.flying):
            received += engine.async_recv("step").indices.tolist()
        assert sorted(received) == [0, 1, 3]
        with pytest.raises(RuntimeError, match=r"sub-envs \[2\] failed or were interrupted"):
            engine.async_step_send([2])
        engine.async_reset_send([2])
        assert engine.async_recv().indices.tolist() == [2]
        engine.async_step_send([2])
        engine.async_recv()
    finally:
        engine.close()


def test_a_dead_worker_raises_and_close_works(no_leaks):
    engine = slow_engine(4, num_workers=2)
    try:
        engine.reset()
        send_sleeps(engine, {0: 0.05, 1: 0.05, 2: 5.0, 3: 0.0})
        pid = engine.executor.handles[1].process.pid
        got = []
        while len(got) < 2:
            got += engine.async_recv().indices.tolist()
        assert sorted(got) == [0, 1]
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="worker 1 .* died"):
            engine.async_recv(timeout=30.0)
        assert time.monotonic() - start < 10.0
        assert engine.flying.tolist() == []
    finally:
        engine.close()


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_ctrl_c_during_a_receive(backend, no_leaks):
    fns = [_face_envs.make_slow] * 2
    chosen = serial_backend() if backend == "serial" else process_backend(ProcessOptions("fork"))
    engine = BatchEngine(SubEnvFactories(2, fns, None, 1), chosen)
    try:
        engine.reset()
        send_sleeps(engine, {0: 1.0, 1: 0.0})
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            engine.async_recv(min_get=2)
        timer.join()
        if backend == "processes":  # nothing lost: both come back later
            got = engine.async_recv(min_get=2, timeout=30.0).indices.tolist()
            assert sorted(got) == [0, 1]
        else:  # sub-env 0 was cut short in this process: its state is unknown
            assert engine.flying.tolist() == [1]
            engine.async_recv()
            with pytest.raises(RuntimeError, match=r"sub-envs \[0\] failed or were interrupted"):
                engine.async_step_send([0])
            with pytest.raises(RuntimeError, match="reset them before stepping"):
                engine.step()
            engine.reset()
        engine.step()
    finally:
        engine.close()


@pytest.mark.parametrize("cut", range(4))
def test_ctrl_c_while_rows_are_handed_out_sends_them_all(cut, monkeypatch, no_leaks):
    # A KeyboardInterrupt anywhere in a first-ready send (here: at the cut-th ticket or
    # wake-up of a send to 3 sub-envs on 3 workers) still sends every row and books it, so
    # none runs behind the engine's back: all come back, and the next steps are right.
    from gymvec.backends.processes import executor as processes

    engine = BatchEngine(
        SubEnvFactories(3, latency_fns(3), None, 1),
        process_backend(ProcessOptions("fork")),
    )
    real_post, calls = processes.WorkerHandle.post, []

    def post(handle, command, payload=None):
        calls.append(command)
        if len(calls) == cut + 1:
            raise KeyboardInterrupt  # as a Ctrl-C between two of send_some's lines would
        real_post(handle, command, payload)

    try:
        engine.reset(seeds=[0, 1, 2])
        expected = [next_step_alone(make_latency(), i, [1, 1]) for i in range(3)]
        engine.buffers.action[("action",)][:] = 1
        monkeypatch.setattr(processes.WorkerHandle, "post", post)
        if cut < 3:
            with pytest.raises(KeyboardInterrupt):
                engine.async_step_send([0, 1, 2], AutoresetMode.NEXT_STEP)
        else:  # past the last post: nothing to cut
            engine.async_step_send([0, 1, 2], AutoresetMode.NEXT_STEP)
        monkeypatch.setattr(processes.WorkerHandle, "post", real_post)
        assert sorted(engine.flying.tolist()) == [0, 1, 2]
        got = engine.async_recv(min_get=3, timeout=30.0).indices.tolist()
        assert sorted(got) == [0, 1, 2] and not engine.flying.size
        obs = engine.buffers.next.obs[("observation",)]
        for i in range(3):
            np.testing.assert_array_equal(obs[i], expected[i][1][0])
        engine.async_step_send([0, 1, 2], AutoresetMode.NEXT_STEP)  # and the next step is right
        engine.async_recv(min_get=3, timeout=30.0)
        for i in range(3):
            np.testing.assert_array_equal(obs[i], expected[i][2][0])
    finally:
        engine.close()


def test_close_with_commands_in_flight(no_leaks):
    engine = slow_engine(2, num_workers=2)
    engine.reset()
    send_sleeps(engine, {0: 0.3, 1: 0.3})
    start = time.monotonic()
    engine.close()
    assert time.monotonic() - start < 10.0


def test_whole_batch_commands_after_first_ready_ones(no_leaks):
    """Worker processes read the right command word after first-ready rows (the parent waits
    for them to settle), and lock-step results stay exact."""
    n = 4
    factories = SubEnvFactories(2, make_latency, None, 2)
    engine = BatchEngine(factories, process_backend(ProcessOptions("fork")))
    alone = [make_latency() for _ in range(n)]
    try:
        engine.reset(seeds=list(range(n)))
        for i, env in enumerate(alone):
            env.reset(seed=i)
        for _ in range(3):
            engine.buffers.action[("action",)][:] = 1
            engine.async_step_send([1, 3])
            engine.async_step_send([0])
            engine.async_recv(min_get=3)
            for i in (1, 3, 0):
                alone[i].step(1)
            engine.step(AutoresetMode.DISABLED)
            steps = [env.step(1) for env in alone]
            for i in range(n):
                obs = engine.buffers.next.obs[("observation",)][i]
                np.testing.assert_array_equal(obs, steps[i][0])
            if engine.any_finished:
                engine.reset(seeds=list(range(n)))
                for i, env in enumerate(alone):
                    env.reset(seed=i)
        assert engine.request("get_attr", name="mean_seconds") == [MEAN_S] * n
    finally:
        engine.close()


def test_face_infos_that_travel_beside_the_buffers_reach_their_rows(no_leaks):
    """Info entries without a buffer field come over each worker's pipe, one message per
    sub-env as it finishes (two sub-envs per worker here): each reaches its own row."""
    n = 4
    envs = ParallelVectorEnv(
        [_face_envs.make_rich] * n, batch_size=2, num_workers=2, local_worker=False,
        context="fork",
    )  # fmt: skip
    seen: dict[int, list] = {i: [] for i in range(n)}
    try:
        envs.async_reset(seed=5)
        for _ in range(20):
            _, _, terminations, truncations, infos = envs.recv()
            for row, i in enumerate(infos["env_id"].tolist()):
                entry = {
                    key: infos[key][row]
                    for key in ("t", "step_name", "reset_only")
                    if key in infos and infos[f"_{key}"][row]
                }
                seen[i].append((entry, bool(terminations[row] or truncations[row])))
            envs.send(np.ones(2, dtype=np.int64), infos["env_id"])
    finally:
        envs.close()
    keys = ("t", "step_name", "reset_only")
    for i in range(n):
        assert len(seen[i]) > 3, seen
        alone = _face_envs.make_rich()
        _, info = alone.reset(seed=5 + i)
        ended = False
        for k, (entry, done) in enumerate(seen[i]):
            assert entry == {key: info[key] for key in keys if key in info}, (i, k)
            assert done == ended, (i, k)
            if ended:  # NEXT_STEP: the step after the end resets
                _, info = alone.reset()
                ended = False
            else:
                *_, terminated, truncated, info = alone.step(1)
                ended = terminated or truncated


def test_ctrl_c_while_reading_a_row_message_loses_that_worker_not_the_env(no_leaks):
    # RichInfoEnv's string infos travel on the worker's pipe. A Ctrl-C in the middle of
    # reading one leaves the rest of that message unreadable: the worker is stopped and its
    # rows are lost (they need a reset), and what comes next raises WorkerError, never a hang.
    envs = ParallelVectorEnv(
        [_face_envs.make_rich] * 2, batch_size=1, num_workers=2, local_worker=False,
        context="fork",
    )  # fmt: skip
    try:
        envs.async_reset(seed=0)
        engine = envs.engine
        handle = engine.executor.handles[0]

        class Interrupted:  # the pipe, cut short at the next read
            def __init__(self, conn):
                self.conn = conn

            def recv(self):
                raise KeyboardInterrupt

            def __getattr__(self, name):
                return getattr(self.conn, name)

        real = handle.conn
        handle.conn = Interrupted(real)
        with pytest.raises(KeyboardInterrupt):
            while True:  # until sub-env 0's message is read
                envs.recv()
        handle.conn = real
        handle.process.join(10)
        assert not handle.process.is_alive()
        assert 0 not in engine.flying.tolist()
        with pytest.raises((WorkerError, RuntimeError)):
            for _ in range(5):  # sub-env 1's rows still come; then the dead worker's error
                envs.recv()
                envs.send(np.ones(1, dtype=np.int64), np.array([1]))
            envs.engine.reset()  # a whole-batch command needs worker 0
    finally:
        envs.close()


def test_a_step_receive_reads_past_a_reset_of_the_same_worker(no_leaks):
    """A worker's messages come in the order it ran its sub-envs: a step receive that reads
    past the message of a reset queued before it keeps it for the reset receive."""
    factories = SubEnvFactories(1, [_face_envs.make_rich] * 2, None, 2)
    engine = BatchEngine(factories, process_backend(ProcessOptions("fork")))
    try:
        engine.reset(seeds=[0, 1])
        engine.buffers.action[("action",)][:] = 1
        engine.async_reset_send([0])
        engine.async_step_send([1])
        step = engine.async_recv("step", timeout=30.0)
        assert step.indices.tolist() == [1]
        assert step.extras[1].next["step_name"] == "step-1"
        reset = engine.async_recv("reset", timeout=30.0)
        assert reset.indices.tolist() == [0]
        assert reset.extras[0].root["reset_only"] == "fresh"
    finally:
        engine.close()
