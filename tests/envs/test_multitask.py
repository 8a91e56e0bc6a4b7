"""Multi-task batches: one factory per worker, tasks whose keys differ."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from gymvec import GymnasiumVectorEnv, ParallelEnv, SerialEnv


def make_cartpole():
    return gym.make("CartPole-v1", max_episode_steps=15)


def _split(obs):
    return {"pos": obs[:2], "vel": obs[2:]}


def make_dict_cartpole():
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32),
            "vel": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }
    )
    env = gym.make("CartPole-v1", max_episode_steps=15)
    return gym.wrappers.TransformObservation(env, _split, space)


def make_pendulum():
    return gym.make("Pendulum-v1")


BUILDERS = {
    "serial": lambda fns: SerialEnv(2, fns, envs_per_worker=2),
    "parallel": lambda fns: ParallelEnv(2, fns, envs_per_worker=2, mp_start_method="fork"),
}


def _obs(env, td, i):
    row = td[i]
    if "observation" in row.keys():
        return row.get("observation").numpy()
    return np.concatenate([row.get("pos").numpy(), row.get("vel").numpy()])


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_tasks_with_different_keys_give_a_lazy_stack_and_exact_trajectories(backend):
    env = BUILDERS[backend]([make_cartpole, make_dict_cartpole])
    refs = [make_cartpole(), make_cartpole(), make_dict_cartpole(), make_dict_cartpole()]
    try:
        assert env.heterogeneous
        env.set_seed(3)
        td = env.reset()
        assert set(td[0].keys()) >= {"observation", "done"} and "pos" not in td[0].keys()
        assert set(td[2].keys()) >= {"pos", "vel"} and "observation" not in td[2].keys()
        ref_obs = [ref.reset(seed=3 + i)[0] for i, ref in enumerate(refs)]
        rng = np.random.default_rng(0)
        episode_ends = 0
        for _ in range(60):
            actions = rng.integers(0, 2, size=4)
            for i in range(4):
                td[i].set("action", torch.tensor(actions[i]))
                expected = ref_obs[i] if i < 2 else np.concatenate(list(ref_obs[i].values()))
                np.testing.assert_array_equal(_obs(env, td, i), expected)
            td, root = env.step_and_maybe_reset(td)
            for i, ref in enumerate(refs):
                obs, reward, terminated, truncated, _ = ref.step(actions[i])
                expected = obs if i < 2 else np.concatenate(list(obs.values()))
                np.testing.assert_array_equal(_obs(env, td["next"], i), expected)
                assert td["next"][i].get("reward").item() == pytest.approx(reward)
                assert td["next"][i].get("terminated").item() == terminated
                assert td["next"][i].get("truncated").item() == truncated
                if terminated or truncated:
                    episode_ends += 1
                    obs, _ = ref.reset()
                ref_obs[i] = obs
            td = root
        assert episode_ends >= 4
    finally:
        env.close()


def test_a_key_with_two_shapes_is_refused():
    with pytest.raises(ValueError, match="observation_spec: key"):
        SerialEnv(2, [make_cartpole, make_pendulum])


def test_the_gymnasium_face_refuses_tasks_with_different_keys():
    env = SerialEnv(2, [make_cartpole, make_dict_cartpole])
    try:
        with pytest.raises(ValueError, match="same keys"):
            GymnasiumVectorEnv(env)
    finally:
        env.close()
