"""Faults that heal in the trainers' drop-ins (API section 13): gymvec.sb3 reports a faulted row
as done with ``TimeLimit.truncated``, its ``terminal_observation`` and ``fault``; gymvec.tianshou
as truncated with ``info["fault"]``; both have ``restarts`` and ``faults``. Each runs against the
same vectorizer without the fault (same seeds, same actions): every other row equal step for
step. SB3's PPO finishes a run through repeated segfaults."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from _flaky_envs import flaky_fns, healthy_fns
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from gymvec.sb3 import ParallelVecEnv, SerialVecEnv

FAULTED, OTHERS = 1, [0, 2]
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")  # (as test_tianshou.py: before tianshou loads)
needs_tianshou = pytest.mark.skipif(
    importlib.util.find_spec("tianshou") is None,
    reason="tianshou is not installed (pip install gymvec[tianshou])",
)

SB3_CASES = [
    pytest.param(lambda fns: SerialVecEnv(fns, on_fault="restart"), "raise", id="SerialVecEnv"),
    pytest.param(
        lambda fns: ParallelVecEnv(
            fns, "fork", num_workers=3, local_worker=False, on_fault="restart"
        ),
        "segv",
        id="ParallelVecEnv-segv",
    ),
]


@pytest.mark.parametrize(("build", "how"), SB3_CASES)
def test_sb3_reports_a_fault_as_a_time_limit_truncation(build, how, no_leaks):
    vec_env, reference = build(flaky_fns(3, FAULTED, 5, how)), DummyVecEnv(healthy_fns(3))
    try:
        vec_env.seed(3)
        reference.seed(3)
        obs, expected_obs = vec_env.reset(), reference.reset()
        faulted_steps = []
        for t in range(12):
            actions = np.array([t % 2, 1, (t + 1) % 2])
            last_obs = obs[FAULTED].copy()
            obs, rewards, dones, infos = vec_env.step(actions)
            expected_obs, expected_rewards, expected_dones, expected_infos = reference.step(actions)
            np.testing.assert_array_equal(obs[OTHERS], expected_obs[OTHERS])
            np.testing.assert_array_equal(rewards[OTHERS], expected_rewards[OTHERS])
            np.testing.assert_array_equal(dones[OTHERS], expected_dones[OTHERS])
            for i in OTHERS:
                assert "fault" not in infos[i]
            if "fault" in infos[FAULTED]:
                faulted_steps.append(t)
                info = infos[FAULTED]
                assert dones[FAULTED] and rewards[FAULTED] == 0.0
                assert info["TimeLimit.truncated"] is True
                np.testing.assert_array_equal(info["terminal_observation"], last_obs)
                expected = "RuntimeError: flaky sub-env" if how == "raise" else "signal"
                assert expected in info["fault"]
                assert "fault" not in vec_env.reset_infos[FAULTED]
        assert faulted_steps == [4, 9]
        assert vec_env.restarts.tolist() == [0, 2, 0]
        assert [fault.sub_env for fault in vec_env.faults] == [FAULTED, FAULTED]
    finally:
        vec_env.close()
        reference.close()


def test_sb3_ppo_finishes_a_run_through_repeated_segfaults(no_leaks):
    """Sub-env 1 segfaults its worker every 100 of its steps: PPO's 2048 steps go through
    them; the worker holding sub-envs 0 and 1 is restarted each time, both rows truncated."""
    fns = flaky_fns(4, FAULTED, 100, "segv")
    # (no share in this process: a segfault there could not heal)
    vec_env = ParallelVecEnv(fns, "fork", num_workers=2, local_worker=False, on_fault="restart")
    try:
        model = PPO("MlpPolicy", vec_env, n_steps=128, batch_size=128, n_epochs=1, seed=0)
        model.learn(total_timesteps=2048)
        assert model.num_timesteps >= 2048
        restarts = vec_env.restarts
        assert restarts[FAULTED] >= 4, restarts  # 512 steps of sub-env 1: a fault per 100
        assert restarts[0] == restarts[FAULTED]  # (its worker's other sub-env)
        assert restarts[2:].tolist() == [0, 0]
        assert {fault.kind for fault in vec_env.faults} == {"death"}
    finally:
        vec_env.close()


@needs_tianshou
@pytest.mark.parametrize("order", [None, [2, 1, 0]], ids=["whole-batch", "by-id"])
@pytest.mark.parametrize("cls_name", ["SerialVectorEnv", "ParallelVectorEnv"])
def test_tianshou_reports_a_fault_as_a_truncation(cls_name, order, no_leaks):
    """Whole-batch steps, and steps by ``id`` out of order (first-ready commands)."""
    import gymvec.tianshou as gymvec_tianshou

    cls = getattr(gymvec_tianshou, cls_name)
    parallel = {"context": "fork", "num_workers": 3, "local_worker": False}
    options = parallel if cls_name == "ParallelVectorEnv" else {}
    venv = cls(flaky_fns(3, FAULTED, 5), on_fault="restart", **options)
    reference = gymvec_tianshou.SerialVectorEnv(healthy_fns(3))
    ids = [0, 1, 2] if order is None else order
    try:
        obs, _ = venv.reset(seed=[3, 4, 5])
        expected_obs, _ = reference.reset(seed=[3, 4, 5])
        faulted_steps = []
        for t in range(8):
            actions = np.array([t % 2, 1, (t + 1) % 2])
            last_obs = obs[FAULTED].copy()
            got_in_id_order = venv.step(actions[ids], id=order)
            expected = reference.step(actions)
            obs, rew, terminated, truncated = (np.empty_like(x) for x in got_in_id_order[:4])
            infos = [{}] * 3
            for k, i in enumerate(ids):  # back in sub-env order
                for out, got in zip((obs, rew, terminated, truncated), got_in_id_order[:4]):
                    out[i] = got[k]
                infos[i] = got_in_id_order[4][k]
            for got, want in zip((obs, rew, terminated, truncated), expected[:4]):
                np.testing.assert_array_equal(got[OTHERS], want[OTHERS])
            if truncated[FAULTED] and "fault" in infos[FAULTED]:
                faulted_steps.append(t)
                assert rew[FAULTED] == 0.0 and not terminated[FAULTED]
                np.testing.assert_array_equal(obs[FAULTED], last_obs)
                assert "RuntimeError: flaky sub-env" in infos[FAULTED]["fault"]
                reset_obs, _ = venv.reset(FAULTED)  # as tianshou's collector resets it
                obs[FAULTED] = reset_obs[0]
        assert faulted_steps == [4]
        assert venv.restarts.tolist() == [0, 1, 0]
        assert [fault.kind for fault in venv.faults] == ["error"]
    finally:
        venv.close()
        reference.close()
