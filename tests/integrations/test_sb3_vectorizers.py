"""gymvec.sb3.ParallelVecEnv / SerialVecEnv through SB3's own idiom, make_vec_env(vec_env_cls=...).

The reference is SB3's DummyVecEnv built by the same make_vec_env call with the same seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from gymvec.sb3 import ParallelVecEnv, SB3VecEnv, SerialVecEnv

# (vec_env_cls, vec_env_kwargs): small worker counts, fork to keep start-up short.
GYMVEC_CLASSES = [
    pytest.param(SerialVecEnv, {}, id="SerialVecEnv"),
    pytest.param(ParallelVecEnv, {"start_method": "fork", "num_workers": 2}, id="ParallelVecEnv"),
]


def _rollout(vec_env, steps: int, seed: int = 0) -> list:
    """Everything the VecEnv returns over ``steps`` random steps (the actions seeded)."""
    rng = np.random.default_rng(seed)
    record = [vec_env.reset(), [dict(info) for info in vec_env.reset_infos]]
    for _ in range(steps):
        actions = rng.integers(0, 2, vec_env.num_envs)
        record.append(vec_env.step(actions))
        record.append([dict(info) for info in vec_env.reset_infos])
    return record


def _assert_same(left, right) -> None:
    if isinstance(left, dict):
        assert set(left) == set(right)
        for key in left:
            if key == "episode":  # Monitor's wall-clock time differs
                assert (left[key]["r"], left[key]["l"]) == (right[key]["r"], right[key]["l"])
            else:
                _assert_same(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right)
        for a, b in zip(left, right):
            _assert_same(a, b)
    elif isinstance(left, np.ndarray):
        assert left.dtype == right.dtype and left.shape == right.shape
        np.testing.assert_array_equal(left, right)
    else:
        assert left == right


@pytest.mark.parametrize(("cls", "kwargs"), GYMVEC_CLASSES)
def test_make_vec_env_gives_dummy_vec_envs_data(cls, kwargs):
    def build(vec_env_cls, vec_env_kwargs):
        return make_vec_env(
            "CartPole-v1",
            4,
            seed=7,
            env_kwargs={"max_episode_steps": 15},  # truncations as well as terminations
            vec_env_cls=vec_env_cls,
            vec_env_kwargs=vec_env_kwargs,
        )

    reference = build(DummyVecEnv, {})
    envs = build(cls, kwargs)
    try:
        assert isinstance(envs, cls) and isinstance(envs, SB3VecEnv)
        expected, got = _rollout(reference, 60), _rollout(envs, 60)
        _assert_same(expected, got)
        step_infos = [info for entry in got[2::2] for info in entry[3]]
        finished = [info for info in step_infos if "terminal_observation" in info]
        truncated = [info for info in finished if info["TimeLimit.truncated"]]
        assert len(finished) > len(truncated) > 0  # both kinds of episode end were compared
        assert all("episode" in info for info in finished)  # Monitor's, from the sub-envs
        assert envs.env_method("get_episode_rewards") == reference.env_method("get_episode_rewards")
    finally:
        envs.close()
        reference.close()


@pytest.mark.parametrize(("cls", "kwargs"), GYMVEC_CLASSES)
def test_ppo_learns_the_same_episodes_as_over_dummy_vec_env(cls, kwargs):
    def learn(vec_env_cls, vec_env_kwargs):
        envs = make_vec_env(
            "CartPole-v1", 4, seed=3, vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs
        )
        try:
            model = PPO("MlpPolicy", envs, n_steps=64, batch_size=64, n_epochs=2, seed=3)
            model.learn(512)
            return envs.env_method("get_episode_rewards"), model.policy.state_dict()
        finally:
            envs.close()

    expected_episodes, expected_policy = learn(DummyVecEnv, {})
    episodes, policy = learn(cls, kwargs)
    assert sum(len(per_env) for per_env in episodes) > 10
    assert episodes == expected_episodes
    for name, tensor in expected_policy.items():
        assert policy[name].equal(tensor), name


def test_sb3_vec_env_given_env_fns_names_the_classes_to_use():
    with pytest.raises(TypeError, match=r"ParallelVecEnv\(env_fns.*SerialVecEnv\(env_fns"):
        make_vec_env("CartPole-v1", 2, vec_env_cls=SB3VecEnv)


def test_parallel_vec_env_options_are_checked_before_anything_starts():
    env_fns = [lambda: None] * 2  # never called: the options are refused first
    with pytest.raises(ValueError, match="autoreset_mode.*same_step"):
        ParallelVecEnv(env_fns, autoreset_mode="next_step")
    with pytest.raises(ValueError, match="start_method='fork', context='spawn'"):
        ParallelVecEnv(env_fns, start_method="fork", context="spawn")
    with pytest.raises(ValueError, match="num_workers"):
        ParallelVecEnv(env_fns, num_workers=0)


def test_parallel_vec_env_takes_kwargs_meant_for_a_larger_env():
    """rl-zoo3 builds its one-env eval env with the training env's vec_env_kwargs."""
    env = make_vec_env(
        "CartPole-v1",
        1,
        vec_env_cls=ParallelVecEnv,
        vec_env_kwargs={"num_workers": 2, "start_method": "fork"},
    )
    try:
        assert env.reset().shape == (1, 4)  # ParallelVectorEnv itself refuses 2 workers here
    finally:
        env.close()
