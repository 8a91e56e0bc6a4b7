"""Faults that heal in first-ready batches (API section 13): a sub-env that raises in a
first-ready step comes back in a ``recv()`` batch like a row that finished, flagged
(``infos["fault"]``, truncated, reward 0), and is rebuilt where it lives; its next step is the
rebuilt sub-env's reset (NEXT_STEP). Every other sub-env's trajectory equals the same run's
without the fault (each sub-env's actions depend on its own step count only, so the
trajectories do not depend on which sub-envs share a batch)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _flaky_envs import FlakyCartPole, FlakyResetCartPole, flaky_fns, healthy_fns

import gymvec

pytestmark = pytest.mark.timeout(120)

N, BATCH, ROW, EVERY, PER_ENV = 4, 2, 2, 6, 16


def first_ready(backend: str, fns: list, **kwargs) -> gymvec.GymnasiumVectorEnv:
    if backend == "serial":
        return gymvec.SerialVectorEnv(fns, batch_size=BATCH, **kwargs)
    return gymvec.ParallelVectorEnv(
        fns, batch_size=BATCH, num_workers=2, local_worker=False, **kwargs
    )


def run(envs, batches: int = 1000) -> tuple[list[list], list[tuple]]:
    """Per sub-env, its (obs, reward, terminated, truncated, fault) in order, until each has
    ``PER_ENV`` (or ``batches`` went by); the faults."""
    per_env: list[list] = [[] for _ in range(N)]
    counts = [0] * N
    faults = []
    envs.async_reset(seed=3)
    for _ in range(batches):
        if min(map(len, per_env)) >= PER_ENV:
            break
        obs, rew, term, trunc, infos = envs.recv()
        for k, i in enumerate(infos["env_id"].tolist()):
            fault = bool(infos["_fault"][k]) if "_fault" in infos else False
            per_env[i].append((obs[k].copy(), rew[k], term[k], trunc[k], fault))
            if fault:
                faults.append((i, rew[k], term[k], trunc[k], infos["fault"][k]))
        ids = infos["env_id"]
        envs.send(np.array([(counts[i] + i) % 2 for i in ids.tolist()]), ids)
        for i in ids.tolist():
            counts[i] += 1
    return per_env, faults


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_a_raise_in_a_first_ready_step_heals_and_the_others_flow_on(backend) -> None:
    envs = first_ready(backend, flaky_fns(N, ROW, EVERY), on_fault="restart")
    reference = first_ready(backend, healthy_fns(N))
    try:
        got, faults = run(envs)
        want, _ = run(reference)
        restarts = envs.restarts
    finally:
        envs.close()
        reference.close()
    assert len(faults) >= 2 and restarts.tolist() == [0, 0, len(faults), 0]
    for i, _, term, trunc, message in faults:
        assert i == ROW and (term, trunc) == (False, True)
        assert message.startswith("RuntimeError: flaky sub-env")
    assert all(f[1] == 0.0 for f in faults)
    for i in range(N):
        if i == ROW:
            continue
        n = min(len(got[i]), len(want[i]))
        assert n >= PER_ENV
        for g, w in zip(got[i][:n], want[i][:n]):
            np.testing.assert_array_equal(g[0], w[0])
            assert g[1:] == w[1:]
    # the faulted row: its last observation, then the rebuilt sub-env's reset (reward 0)
    rows = got[ROW]
    k = next(j for j, r in enumerate(rows) if r[4])
    np.testing.assert_array_equal(rows[k][0], rows[k - 1][0])
    assert rows[k + 1][1:] == (0.0, False, False, False)


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_a_raise_in_a_first_ready_reset_is_sent_again_rebuilt(backend) -> None:
    fns = [FlakyCartPole] * N
    fns[ROW] = functools.partial(FlakyResetCartPole, 2, "raise")  # its 2nd reset raises
    envs = first_ready(backend, fns, on_fault=gymvec.Restart(limit=1))
    try:
        for seed in (0, 1):  # the second first-ready reset faults on row ROW
            envs.async_reset(seed=seed)
            seen = []
            for _ in range(N // BATCH):
                obs, *_, infos = envs.recv()
                assert "_fault" not in infos  # (a reset's fault is not a truncation)
                seen += infos["env_id"].tolist()
            assert sorted(seen) == list(range(N))
        assert envs.restarts.tolist() == [0, 0, 1, 0]
        envs.send(np.zeros(N, dtype=np.int64))  # and every sub-env steps on
        for _ in range(N // BATCH):
            envs.recv()
    finally:
        envs.close()


FAULT_MESSAGES = {
    "exit": "worker died: exit code 3",
    "segv": "worker died: signal 11",
    "hang": "timed out after 1.0 s",
}


@pytest.mark.parametrize(
    ("how", "kind"), [("exit", "death"), ("segv", "death"), ("hang", "timeout")]
)
def test_a_worker_death_in_first_ready_steps_heals(how, kind) -> None:
    """Worker 1 (rows 2 and 3) dies (``os._exit``, SIGSEGV) or hangs past ``timeout=`` in a
    first-ready step while worker 0's rows keep finishing (so no wait as a whole times out): it
    starts again; its rows come back as faults, then the rebuilt sub-envs' resets; worker 0's
    rows equal the run without the fault step for step."""
    fns = flaky_fns(N, ROW, EVERY, how)
    envs = first_ready("processes", fns, on_fault="restart", timeout=1.0)
    reference = first_ready("processes", healthy_fns(N), timeout=1.0)
    try:
        # (while a hang lasts, worker 0's rows alone fill thousands of batches)
        got, faults = run(envs, batches=10**6)
        want, _ = run(reference)
        restarts, records = envs.restarts, envs.faults
    finally:
        envs.close()
        reference.close()
    assert len(faults) >= 2 and {i for i, *_ in faults} <= {2, 3}
    prefix = FAULT_MESSAGES[how]
    for _, rew, term, trunc, message in faults:
        assert (rew, term, trunc) == (0.0, False, True) and message.startswith(prefix)
    assert restarts[:2].tolist() == [0, 0] and restarts[ROW] >= 2
    assert {f.kind for f in records} == {kind} and {f.worker for f in records} == {1}
    for i in range(2):
        n = min(len(got[i]), len(want[i]))
        assert n >= PER_ENV
        for g, w in zip(got[i][:n], want[i][:n]):
            np.testing.assert_array_equal(g[0], w[0])
            assert g[1:] == w[1:]
    for i in (2, 3):  # each fault: the last observation, then the rebuilt sub-env's reset
        rows = got[i]
        for k in [j for j, r in enumerate(rows) if r[4] and 0 < j < len(rows) - 1]:
            np.testing.assert_array_equal(rows[k][0], rows[k - 1][0])
            assert rows[k + 1][1:] == (0.0, False, False, False)


def test_without_restart_a_first_ready_hang_is_a_timeout_while_others_finish() -> None:
    """``on_fault="raise"``: the hung worker's row past ``timeout=`` is a SubEnvTimeoutError
    naming it, although worker 0's rows keep finishing; the env then refuses to go on."""
    envs = first_ready("processes", flaky_fns(N, ROW, EVERY, "hang"), timeout=1.0)
    try:
        with pytest.raises(gymvec.SubEnvTimeoutError, match=r"past the timeout of 1.0 s") as info:
            run(envs, batches=10**6)
        assert "sub-envs [2" in str(info.value) and "workers [1]" in str(info.value)
        with pytest.raises(RuntimeError, match="close"):
            envs.recv()
    finally:
        envs.close()
